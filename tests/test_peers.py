"""The peers of `tools/benchmark.py --peers` (tools/peers/) train the examples' problem, and the
benchmark's ratios and skip messages say what they should. Cheap: one short real run of each
peer that this test environment can import, skipped with the reason otherwise (the TF1 route
has neither torch nor TensorFlow 2; the TF2 route has TensorFlow 2, not torch)."""
import importlib.util
import os
import sys

import numpy as np
import pytest

from helpers import (ROOT, data_and_initial_theta, load_example, results_in, run_script,
                     tf_major_version)

import benchmark
from peers import common

pytestmark = pytest.mark.tf2  # TensorFlow-agnostic, so part of both routes


@pytest.fixture(scope="module")
def dist_setup():
    return load_example("Distributed-Setup/dist_setup.py")


def test_the_peers_data_and_split_are_the_examples(dist_setup):
    ours, _ = data_and_initial_theta(dist_setup)
    theirs = common.load_digits(0)
    assert [x.shape for pair in theirs for x in pair] == [(1437, 64), (1437,), (360, 64), (360,)]
    for (our_x, our_y), (their_x, their_y) in zip(ours, theirs):
        assert their_x.dtype == our_x.dtype and their_y.dtype == our_y.dtype
        np.testing.assert_array_equal(their_x, our_x)
        np.testing.assert_array_equal(their_y, our_y)
    assert 0.0 <= theirs[0][0].min() and theirs[0][0].max() <= 1.0


def test_the_peers_shards_are_the_examples_shards():
    """worker_batches takes images[worker::workers]; so does common.shard."""
    (train_x, train_y), _ = common.load_digits(0)
    shards = [common.shard(train_x, train_y, worker, 2) for worker in range(2)]
    assert [len(x) for x, _ in shards] == [len(train_x[0::2]), len(train_x[1::2])] == [719, 718]
    np.testing.assert_array_equal(shards[1][0], train_x[1::2])
    np.testing.assert_array_equal(np.sort(np.concatenate([y for _, y in shards])),
                                  np.sort(train_y))


def test_minibatches_cover_each_epoch_once_and_run_across_epochs():
    batches = common.batch_indices(70, 32, seed=1)
    first = np.concatenate([next(batches) for _ in range(35)])  # 16 epochs of 70 rows
    assert all(len(batch) == 32 for batch in [next(batches)])
    for epoch in range(16):
        assert sorted(first[epoch * 70:(epoch + 1) * 70]) == list(range(70))


def test_the_initial_parameters_and_layer_shapes_are_the_examples(dist_setup):
    _, ours = data_and_initial_theta(dist_setup)
    theirs = common.initial_parameters(64, 10, 0)
    assert [value.shape for _, value in theirs] == [(64, 128), (128,), (128, 10), (10,)]
    for mine, (_, theirs_) in zip(ours, theirs):
        np.testing.assert_array_equal(mine, theirs_)


def test_every_peer_uses_the_compared_examples_budget_and_rates():
    """The default budget and η of each peer are those of the example it is compared with."""
    sources = {name: open(os.path.join(benchmark.PEERS_DIR, script)).read()
               for name, (script, _, _, _) in benchmark.PEERS.items()}
    for name in benchmark.PEERS:
        assert "train_steps=1000, learning_rate=0.1" in sources[name], name
    for ours in ("Hogwild/Hogwild.py", "Synchronous-SGD/ssgd.py"):
        assert "train_steps=1000, learning_rate=0.1" in open(os.path.join(ROOT, ours)).read()


def test_ratios_are_ours_over_the_peer_round_by_round():
    runs = [{"round": r, "entry": entry, "aggregate_steps_per_second": value,
             "wall_seconds": wall}
            for r, values in enumerate([(900.0, 1500.0), (1000.0, 1000.0), (600.0, None)])
            for entry, value, wall in zip(["Synchronous-SGD/run.sh", "torch-ddp"], values,
                                          (5.0, 10.0))]
    assert benchmark.paired_ratios(runs, "Synchronous-SGD/run.sh", "torch-ddp",
                                   "aggregate_steps_per_second") == [0.6, 1.0]
    assert benchmark.paired_ratios(runs, "Synchronous-SGD/run.sh", "torch-ddp",
                                   "wall_seconds") == [0.5, 0.5, 0.5]
    assert benchmark.spread([0.6, 1.0, None]) == "0.8 (0.6–1.0)"
    assert benchmark.ratio(1.0, 0.0) is None and benchmark.ratio(None, 2.0) is None
    text = benchmark.peers_ratios(runs)
    assert "| Synchronous-SGD / torch-ddp | aggregate steps/s | 0.80 (0.60–1.00)× | ≥ 1.00× |" in text
    assert "Hogwild" not in text  # a pair that did not run has no row


def test_the_floor_compares_steady_step_times_round_by_round():
    """--floor: a step time is read between the first and the last point of the worker's
    accuracy curve ([time, global step, accuracy]), so that what the first session.runs cost
    once does not count; the ratio is to the one-process step of the same round."""
    def run(entry, round_, curve, whole):
        made = {"entry": entry, "round": round_, "steps_per_second_per_worker": whole,
                "results": [{"curve": curve}]}
        return dict(made, steady_steps_per_second=benchmark.steady_rate(made))

    baseline, looped = benchmark.BASELINE, "Distributed-Setup/run.sh K=100"
    runs = [run(baseline, 0, [[10.0, 1000, 0.9], [11.0, 2000, 0.9], [12.0, 3000, 0.9]], 1500.0),
            run(looped, 0, [[20.0, 1000, 0.9], [22.5, 3000, 0.9]], 700.0),  # 800/s steady
            run(baseline, 1, [[5.0, 1000, 0.9], [7.0, 3000, 0.9]], 900.0),
            run(looped, 1, [[30.0, 1000, 0.9]], 500.0)]  # one point: no steady rate
    assert [r["steady_steps_per_second"] for r in runs] == [1000.0, 800.0, 1000.0, None]
    table = benchmark.floor_table(runs)
    assert "| Distributed-Setup | 100 | 600 (500–700) | 800 | 1250 | 1.25× | ≤ 2.0× |" in table
    assert ("| one process (Non-Distributed_Setup.py) | 1 | 1200 (900–1500) | 1000 (1000–1000) "
            "| 1000 (1000–1000) | 1 |") in table


def test_the_torch_hogwild_target_is_judged_at_k_equals_100():
    runs = [{"round": 0, "entry": "Hogwild/run.sh", "aggregate_steps_per_second": 150.0},
            {"round": 0, "entry": "Distributed-Setup/run.sh K=100",
             "aggregate_steps_per_second": 600.0},
            {"round": 0, "entry": "torch-hogwild", "aggregate_steps_per_second": 1500.0}]
    text = benchmark.peers_ratios(runs)
    assert "| Hogwild / torch-hogwild | aggregate steps/s | 0.10× | -* |" in text
    assert ("| Distributed-Setup K=100 / torch-hogwild | aggregate steps/s | 0.40× | ≥ 0.25×* |"
            in text)
    assert "K = 100 steps per session.run" in text and "not yet built" not in text
    command = benchmark.command_of("Distributed-Setup/run.sh K=100", ["--log_every", "50"])
    assert command[-4:] == [
        "--steps_per_run", "100", "--log_every", "50"]


@pytest.mark.parametrize("name", sorted(benchmark.PEERS))
def test_a_peer_without_its_interpreter_is_skipped_with_the_install_command(name):
    reason = benchmark.peer_skip_reason(name, "/nonexistent/bin/python")
    assert reason.startswith(name + " skipped: no interpreter at /nonexistent/bin/python")
    assert "\n" not in reason
    if benchmark.PEERS[name][1] == "torch":
        assert "pip install torch" in reason and "download.pytorch.org/whl/cpu" in reason
        assert "--torch_python" in reason
    else:
        assert "bash setup.sh --tf2" in reason and "--tf2_python" in reason


def test_a_peer_whose_interpreter_cannot_import_it_is_skipped(monkeypatch):
    script, route, _, install = benchmark.PEERS["torch-ddp"]
    monkeypatch.setitem(benchmark.PEERS, "torch-ddp",
                        (script, route, "no_such_module_for_the_test", install))
    reason = benchmark.peer_skip_reason("torch-ddp", sys.executable)
    assert "cannot import no_such_module_for_the_test" in reason and "pip install torch" in reason


def test_torch_is_not_a_dependency_of_the_project():
    for name in os.listdir(os.path.join(ROOT, "requirements")):
        assert "torch" not in open(os.path.join(ROOT, "requirements", name)).read().lower()


def importable_here(name):
    """None if this test environment can run the peer, else why not."""
    if benchmark.PEERS[name][1] == "torch":
        return None if importlib.util.find_spec("torch") else (
            "torch is not importable here (not a dependency of the project)")
    try:
        return None if tf_major_version() >= 2 else "TensorFlow 2 is not importable here"
    except ImportError:
        return "TensorFlow is not importable here"


@pytest.mark.parametrize("name", sorted(benchmark.PEERS))
def test_a_short_real_run_of_each_importable_peer(name):
    reason = importable_here(name)
    if reason:
        pytest.skip(reason)
    script = os.path.join(benchmark.PEERS_DIR, benchmark.PEERS[name][0])
    code, text = run_script([sys.executable, script, "--train_steps", "60", "--log_every", "20"],
                            timeout=90)
    assert code == 0, text[-3000:]
    results = results_in(text)
    assert results and all(r["workers"] == 2 and r["global_step"] >= 60 for r in results), text
    assert sum(r["local_steps"] for r in results) >= 60
    # A Hogwild process that starts late may make fewer than --log_every steps: no point.
    assert any(r["curve"] for r in results), text
    assert all(len(point) == 3 for r in results for point in r["curve"])
    assert sum(r["steps_per_second"] or 0 for r in results) > 0  # one may have had no turn
    assert max(r["test_accuracy"] for r in results) > 0.5
