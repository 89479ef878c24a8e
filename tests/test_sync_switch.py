"""Sync-Switch/: synchronous SGD until --switch_at, then Hogwild's asynchronous updates.

Every run is a real cluster on free localhost ports. The exact test uses three workers and
batches of 479 examples, one whole shard of the 1,437 training images, so that each minibatch
gradient is the full-shard gradient: NumPy recomputes the synchronous updates from the
checkpoints the chief saved after each, and the asynchronous ones from every order in which
the three workers' reads and updates can interleave.
"""
import itertools
import os
import re
import signal

import numpy as np
import pytest

from helpers import (AFTER_START_TIMEOUT, assert_no_process_left, example, last_checkpoint_step,
                    load_example, LocalCluster, output, rejected, run_cluster, run_sh,
                    results_in, worker_results)
from test_asynchronous import cluster_flags, worker_args
from test_fidelity import ancestors
from test_lifecycle import kill_and_restart
from test_synchronous import (SHARD, assert_updates_are_means_of_fresh_contributions, gradient,
                              ps_says_all_done, shards_and_initial_parameters, tokens_taken)

SYNC_SWITCH = "Sync-Switch/Sync-Switch.py"
RETRYABLE = 138
NAMES = ["hidden_weights", "hidden_biases", "output_weights", "output_biases"]


@pytest.mark.tf2
def test_run_sh_reaches_accuracy_switching_at_global_step_250():
    """`bash run.sh` with its defaults (--switch_at 0.25 of 1,000 global steps): 250 synchronous
    updates (M worker steps each), then asynchronous steps, each one global step."""
    text = run_sh("Sync-Switch/Sync-Switch.py")
    results = sorted(results_in(text), key=lambda r: r["task_index"])
    assert [r["task_index"] for r in results] == [0, 1], text
    assert all(r["test_accuracy"] >= 0.93 for r in results), results
    tokens_taken(results, 250, [r["synchronous_local_steps"] for r in results])
    # After the switch the global step counts every worker's step: 750 of them in all (one
    # more for each worker that stepped while the other made the last).
    after = sum(r["local_steps"] - r["synchronous_local_steps"] for r in results)
    assert 750 <= after <= 751 and all(r["global_step"] >= 1000 for r in results), results
    assert "all 2 workers are done; exiting" in text, text


def read_theta(tf, log_dir, step):
    reader = tf.train.load_checkpoint(os.path.join(log_dir, "model.ckpt-%d" % step))
    assert reader.get_tensor("global_step") == step
    return [reader.get_tensor(name).astype(np.float64) for name in NAMES]


def every_asynchronous_outcome(theta, shards, rate):
    """θ after each worker applies θ ← θ − η·gᵢ(θ read) once, for every order of the reads and
    updates (a worker reads before it updates; an update lands whole)."""
    workers, outcomes = len(shards), []
    events = [(i, kind) for i in range(workers) for kind in ("read", "update")]
    for order in set(itertools.permutations(events)):
        if any(order.index((i, "read")) > order.index((i, "update")) for i in range(workers)):
            continue
        current, read = [value.copy() for value in theta], {}
        for i, kind in order:
            if kind == "read":
                read[i] = [value.copy() for value in current]
            else:
                step = gradient(read[i], *shards[i])
                current = [value - rate * g for value, g in zip(current, step)]
        outcomes.append(current)
    return outcomes


@pytest.mark.tf2
def test_updates_are_means_of_n_gradients_before_the_switch_and_single_gradients_after(
        tmp_path):
    """Three workers, --train_steps 3, --switch_at 0.67: s = 2. Global steps 1 and 2 are
    synchronous: θ − η·mean gᵢ(θ), all at the same θ (almost always one gᵢ of each worker; see
    assert_updates_are_means_of_fresh_contributions). At global step 2 every worker switches
    and makes one asynchronous step (2 < 3 when it looks), so the run ends at global step 5
    with θ₂ minus η times three single gradients, in some order. The chief sleeps after each
    step, so that its final checkpoint comes after the others' updates."""
    rate, workers = 0.5, 3
    module, shards, initial = shards_and_initial_parameters(SYNC_SWITCH, workers)
    log_dir = str(tmp_path / "logs")
    cluster = run_cluster(SYNC_SWITCH, workers=workers, args=[
        "--train_steps", "3", "--switch_at", "0.67", "--batch_size", str(SHARD),
        "--learning_rate", str(rate), "--log_dir", log_dir, "--checkpoint_every", "1"],
        task_args={"worker0": ["--step_delay", "1"]})
    results = worker_results(cluster)
    assert [r["local_steps"] - r["synchronous_local_steps"] for r in results] == [1] * 3
    assert ps_says_all_done(cluster, workers)
    # θ₀ is the seeded initial θ (checkpoint 0 may be gone: the Saver keeps 5, and a chief
    # that sees global steps 3 and 4 as well saves 6); update 1 checks that training began there.
    thetas = [initial] + [read_theta(module.tf, log_dir, step) for step in (1, 2)]
    assert_updates_are_means_of_fresh_contributions(thetas, lambda theta, i, update: [
        -rate * part for part in gradient(theta, *shards[i])],
        [r["synchronous_local_steps"] for r in results])
    assert last_checkpoint_step(log_dir) == 5
    final = read_theta(module.tf, log_dir, 5)
    outcomes = every_asynchronous_outcome(thetas[2], shards, rate)
    distances = [max(np.abs(got - want).max() for got, want in zip(final, outcome))
                 for outcome in outcomes]
    assert min(distances) < 1e-5, min(distances)
    # The synchronous rule would have given another θ, measurably.
    mean = [value - rate * np.mean(parts, axis=0) for value, parts in zip(
        thetas[2], zip(*[gradient(thetas[2], *shard) for shard in shards]))]
    assert max(np.abs(got - want).max() for got, want in zip(final, mean)) > 1e-3


@pytest.mark.tf2
def test_both_steps_share_theta_on_the_ps_and_the_gradient_computed_on_the_worker():
    module = load_example(SYNC_SWITCH)
    tf, worker = module.tf, "/job:worker/task:1"
    args = worker_args(module, cluster_flags(2), 1)
    with tf.Graph().as_default() as graph:
        built = module.build_graph(args)
        assert all(v.device == "/job:ps/task:0" for v in tf.global_variables())
        # θ and the global step, and SyncReplicasOptimizer's accumulators and token queue.
        names = {v.op.name for v in tf.global_variables()}
        assert set(NAMES + ["global_step"]) <= names
        assert all(v.device == worker for v in tf.local_variables())  # (the sync local step)
        operations = graph.get_operations()
        accumulators = [op for op in operations if op.type.endswith("ConditionalAccumulator")]
        assert [op.device for op in accumulators] == ["/job:ps/task:0"] * 4
        gradient_ops = [op for op in operations if op.name.startswith("gradients/")]
        assert gradient_ops and all(op.device == worker for op in gradient_ops)
        # The asynchronous step: Hogwild's, lock-free on the ps, its counter locked; the
        # synchronous one's update is the chief's aggregation (also on the ps).
        applies = [op for op in operations if op.type == "ApplyGradientDescent"]
        assert len(applies) == 8 and all(op.device == "/job:ps/task:0" for op in applies)
        hogwild = [op for op in applies if op.name in ancestors(built["asynchronous_step"].op)]
        assert len(hogwild) == 4 and not any(op.get_attr("use_locking") for op in hogwild)
        # Both take the same gradient, computed once on the worker.
        sent = ancestors(built["synchronous_step"].op) & ancestors(built["asynchronous_step"].op)
        assert any(name.startswith("gradients/") for name in sent)
        assert built["asynchronous_step"].op.type == "AssignAdd"
        assert built["asynchronous_step"].op.get_attr("use_locking")


@pytest.mark.parametrize("argv, expected", [
    (["--switch_at", "1.5"], "--switch_at must be a fraction of --train_steps from 0 to 1, "
                             "got 1.5"),
    (["--switch_at", "-0.1"], "from 0 to 1, got -0.1"),
    (["--switch_at", "nan"], "from 0 to 1, got nan")])
def test_a_switch_point_out_of_range_gets_one_line_and_exit_2(argv, expected, capsys):
    assert expected in rejected(load_example(SYNC_SWITCH), cluster_flags(2) + argv, capsys)


def kill_worker1_at(local_step, args, step_delay="0"):
    cluster = LocalCluster(example(SYNC_SWITCH), workers=2, echo=False, args=[
        "--log_every", "50", "--step_delay", step_delay] + args)
    try:
        cluster.start()
        assert cluster.wait_for_line("worker1", r"step %d " % local_step, 120), output(cluster)
        cluster.kill("worker1")
        assert cluster.wait(60, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    return cluster


def test_a_worker_killed_before_the_switch_ends_the_others_naming_it():
    """As in Synchronous-SGD without backup workers: no update can complete without it."""
    cluster = kill_worker1_at(100, ["--train_steps", "1000000", "--switch_at", "1",
                                    "--timeout", AFTER_START_TIMEOUT])
    assert cluster.returncodes() == {"ps0": 1, "worker0": RETRYABLE, "worker1": -signal.SIGKILL}
    port = cluster.worker_hosts[1]
    assert re.search(r"\[worker0\] error: worker1 \(%s\) is gone before the end of training "
                     r".*every update needs 2 workers" % port, output(cluster, "worker0"))


def test_a_worker_killed_after_the_switch_lets_the_other_finish_as_in_hogwild():
    """Switched at global step 100, worker1 is killed at its local step 150; worker0 goes on
    alone (held to 50 steps/s) to --train_steps, and the ps names the worker that never
    finished."""
    cluster = kill_worker1_at(150, ["--train_steps", "600", "--switch_at", "0.1667",
                                    "--timeout", AFTER_START_TIMEOUT], step_delay="0.02")
    assert cluster.returncodes() == {"ps0": 1, "worker0": 0, "worker1": -signal.SIGKILL}
    result = cluster.task("worker0").result()
    assert result["synchronous_local_steps"] == 100 and result["global_step"] >= 600
    assert re.search(r"worker1 \(\S+\) stopped without finishing; 1 of 2 workers finished",
                     output(cluster, "ps0")), output(cluster)
    assert "is gone" not in output(cluster, "worker0")


def test_a_ps_restarted_after_the_switch_restores_a_step_after_it(tmp_path):
    """The chief checkpoints θ at the switch (s = 200 here, --checkpoint_every longer than the
    run, so the step-0 checkpoint is the only other one): ps0 killed and restarted after the
    switch gets θ back from a step ≥ s, and worker1, restarted then, goes straight to the
    asynchronous steps. (From a step below s it would wait for an aggregation that has ended,
    until --timeout.) Every task ends with 0."""
    log_dir = str(tmp_path / "logs")
    cluster = LocalCluster(example(SYNC_SWITCH), workers=2, echo=False, args=[
        "--train_steps", "2000", "--switch_at", "0.1", "--step_delay", "0.01", "--log_every",
        "50", "--checkpoint_every", "100000", "--log_dir", log_dir,
        "--timeout", AFTER_START_TIMEOUT])
    try:
        cluster.start()
        assert cluster.wait_for(lambda: cluster.failed() or last_checkpoint_step(log_dir) > 0,
                                120), output(cluster)
        saved = last_checkpoint_step(log_dir)  # the switch's, taken while training goes on
        assert 200 <= saved < 2000 and not cluster.failed(), (saved, output(cluster))
        kill_and_restart(cluster, "ps0")
        assert cluster.wait_for_line("worker0", r"resuming from", 60), output(cluster)
        kill_and_restart(cluster, "worker1")
        assert cluster.wait(120), output(cluster)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert set(cluster.returncodes().values()) == {0}, output(cluster)
    resumed = re.findall(r"resuming from \S+-(\d+)", output(cluster, "worker0"))
    assert resumed and int(resumed[-1]) >= 200, output(cluster, "worker0")
    result = cluster.task("worker1").result()
    assert result["synchronous_local_steps"] == 0 and result["global_step"] >= 2000, result
