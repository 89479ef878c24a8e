"""Gossip-SGD/: decentralized SGD, every worker averaging its replica with one seeded peer.

Every run is a real cluster of worker processes (no ps) on free localhost ports. The exact-update
test uses three workers and a batch of 479 examples, one whole shard of the 1,437 training
images, so that each minibatch gradient is the full-shard gradient; NumPy replays every local
step and every average, with a schedule drawn here independently of the script, and compares
every replica with the chief's checkpoints, which hold all of them.
"""
import os
import re
import signal

import numpy as np
import pytest

from helpers import (AFTER_START_TIMEOUT, assert_no_process_left, data_and_initial_theta, example,
                    free_ports, load_example, LocalCluster, output, rejected, results_in,
                    run_cluster, run_sh, worker_results)
from test_synchronous import SHARD, gradient

GOSSIP = "Gossip-SGD/Gossip-SGD.py"
RETRYABLE = 138
NAMES = ["hidden_weights", "hidden_biases", "output_weights", "output_biases"]


def peers_of_round(seed, round_index, workers):
    """The schedule as the docstring states it: RandomState(seed + r).randint(M − 1, size=M)
    draws d for worker i, whose peer is d + (d ≥ i)."""
    draws = np.random.RandomState(seed + round_index).randint(workers - 1, size=workers)
    return [int(draw) + int(draw >= worker) for worker, draw in enumerate(draws)]


def replica_name(worker, name):
    """Where θⱼ's variable is, in every graph and in the chief's checkpoints: worker<j>/name,
    θ₀'s at the root, by the name model() gives it."""
    return "worker%d/%s" % (worker, name) if worker else name


def replicas_in(module, path, workers):
    """Every worker's θᵢ, in float64, from one of the chief's checkpoints, and its step."""
    reader = module.tf.train.load_checkpoint(path)
    return ([[reader.get_tensor(replica_name(worker, name)).astype(np.float64)
              for name in NAMES] for worker in range(workers)],
            int(reader.get_tensor("global_step")))


def replay(thetas, shards, rate, window, first_step, last_step, seed=0):
    """θᵢ ← θᵢ − η·gᵢ every step; after every step that is a multiple of T, each θᵢ ←
    (θᵢ + θⱼ)/2 with j its peer of that round and θⱼ as it was before anyone averaged."""
    thetas = [list(theta) for theta in thetas]
    for step in range(first_step + 1, last_step + 1):
        thetas = [[value - rate * grad for value, grad in zip(theta, gradient(theta, *shard))]
                  for theta, shard in zip(thetas, shards)]
        if step % window == 0:
            peers = peers_of_round(seed, step // window, len(thetas))
            thetas = [[(mine + theirs) / 2 for mine, theirs in zip(theta, thetas[peer])]
                      for theta, peer in zip(thetas, peers)]
    return thetas


def consensus_distance(thetas):
    flat = np.array([np.concatenate([value.ravel() for value in theta]) for theta in thetas])
    return np.linalg.norm(flat - flat.mean(axis=0), axis=1).max()


def assert_replicas_equal(actual, expected):
    for worker, (got, want) in enumerate(zip(actual, expected)):
        for name, got_value, want_value in zip(NAMES, got, want):
            np.testing.assert_allclose(got_value, want_value, rtol=1e-4, atol=2e-6,
                                       err_msg="worker%d's %s" % (worker, name))


@pytest.mark.tf2
def test_every_local_step_and_every_average_is_exact_and_a_resumed_run_goes_on(tmp_path):
    """Three workers, T = 2, η = 0.5: three steps, then the whole cluster started again with
    --log_dir for four more, resumed from a step that is not a multiple of T (its rounds are
    still those of steps 4 and 6). The chief checkpoints every replica at the start and at the
    end (--checkpoint_every is longer than the run), once all are done; NumPy replays both."""
    workers, rate, window, module = 3, 0.5, 2, load_example(GOSSIP)
    (images, labels), _ = data_and_initial_theta(module, 0)[0]
    shards = [(images[i::workers].astype(np.float64), labels[i::workers])
              for i in range(workers)]
    assert all(len(shard_labels) == SHARD for _, shard_labels in shards)
    initial = data_and_initial_theta(module)[1]
    log_dir = str(tmp_path / "logs")
    args = ["--batch_size", str(SHARD), "--learning_rate", str(rate), "--window", str(window),
            "--log_dir", log_dir, "--checkpoint_every", "1000"]
    checkpoint = os.path.join(log_dir, "model.ckpt-%d")
    expected = {0: [initial] * workers}
    for first, last in [(0, 3), (3, 7)]:
        cluster = run_cluster(GOSSIP, workers=workers, args=["--train_steps", str(last)] + args)
        results = worker_results(cluster)
        assert [(r["first_global_step"], r["global_step"], r["local_steps"]) for r in results] \
            == [(first, last, last - first)] * workers, results
        started_from, step = replicas_in(module, checkpoint % first, workers)
        assert step == first
        assert_replicas_equal(started_from, expected[first])
        expected[last] = replay(expected[first], shards, rate, window, first, last)
        final, step = replicas_in(module, checkpoint % last, workers)
        assert step == last
        assert_replicas_equal(final, expected[last])
        # What the chief reports is the distance of these replicas.
        assert results[0]["consensus_distance"] == pytest.approx(
            consensus_distance(final), rel=1e-4, abs=1e-6)
        assert all("consensus_distance" not in r for r in results[1:])
    # The test has the power to tell the right peer from a wrong one, or an average from none:
    # before each round's averages every two replicas differ by far more than the tolerance.
    theta = expected[0]
    for step in range(1, 8):
        before = replay(theta, shards, rate, 10 ** 6, step - 1, step)  # (no average)
        assert min(np.abs(before[a][0] - before[b][0]).max()
                   for a in range(workers) for b in range(a)) > 1e-3, step
        theta = replay(theta, shards, rate, window, step - 1, step)
    # ... and the schedule after the resume from one keyed by the steps since (rounds at 5, 7)
    since_the_resume = replay(expected[3], shards, rate, window, 0, 4)
    assert max(np.abs(a - b).max() for x, y in zip(since_the_resume, expected[7])
               for a, b in zip(x, y)) > 1e-3

def test_the_schedule_is_the_documented_one_and_covers_every_pair():
    module = load_example(GOSSIP)
    for workers in (2, 3, 5):
        for round_index in range(20):
            peers = module.gossip_peers(7, round_index, workers)
            assert peers == peers_of_round(7, round_index, workers)
            assert all(peer != worker for worker, peer in enumerate(peers))
    drawn = {(worker, peer) for round_index in range(50)
             for worker, peer in enumerate(module.gossip_peers(0, round_index, 4))}
    assert drawn == {(a, b) for a in range(4) for b in range(4) if a != b}


@pytest.mark.tf2
def test_run_sh_reaches_accuracy_on_every_worker_with_no_ps():
    """`bash run.sh` with its defaults, from another directory: workers only, each makes
    --train_steps local steps, and the chief reports the consensus distance. With two workers
    each round's two averages are the same sum halved, so the replicas meet exactly at the
    last step (1000 is a multiple of T = 10) and the distance is 0."""
    text = run_sh(GOSSIP)
    results = sorted(results_in(text), key=lambda r: r["task_index"])
    assert [r["task_index"] for r in results] == [0, 1], text
    assert all(r["test_accuracy"] >= 0.93 for r in results), results
    assert [(r["global_step"], r["local_steps"]) for r in results] == [(1000, 1000)] * 2
    assert results[0]["consensus_distance"] == 0.0, results[0]
    assert "[ps0]" not in text and "all 2 workers are done; exiting" in text, text
    assert "gossip_sgd: 2 worker(s)" in text


def parse(module, task_index=1, workers=3, extra=()):
    hosts = ",".join("localhost:%d" % port for port in free_ports(workers))
    return module.parse_flags(["--job_name", "worker", "--task_index", str(task_index),
                               "--worker_hosts", hosts] + list(extra))


def variable_devices(module, args):
    tf = module.tf
    with tf.Graph().as_default() as graph:
        built = module.build_graph(args)
        devices = {v.op.name: v.device for v in tf.global_variables()}
        queues = {op.get_attr("shared_name").decode(): op.device
                  for op in graph.get_operations() if op.type == "FIFOQueueV2"}
        compute = {op.device for op in graph.get_operations()
                   if op.type in ("MatMul", "ReluGrad", "ApplyGradientDescent")}
    return built, devices, queues, compute


def test_each_replica_lives_on_its_own_worker_and_the_chief_sees_them_all():
    module = load_example(GOSSIP)
    _, devices, queues, compute = variable_devices(module, parse(module, task_index=0))
    assert devices == dict({"global_step": "/job:worker/task:0"}, **{
        replica_name(j, name): "/job:worker/task:%d" % j for j in range(3) for name in NAMES})
    built, devices, queues, compute = variable_devices(module, parse(module, task_index=1))
    assert devices == dict({"global_step": "/job:worker/task:1"}, **{
        "worker1/%s" % name: "/job:worker/task:1" for name in NAMES})
    assert compute == {"/job:worker/task:1"}
    # Worker 1 sends from its own task and reads each peer's θ from the peer's task.
    assert queues == {"gossip_start": "/job:worker/task:0",
                      "gossip_finished": "/job:worker/task:0",
                      "gossip_from_1_to_0": "/job:worker/task:1",
                      "gossip_from_1_to_2": "/job:worker/task:1",
                      "gossip_from_0_to_1": "/job:worker/task:0",
                      "gossip_from_2_to_1": "/job:worker/task:2"}
    assert sorted(built["send_to"]) == sorted(built["average_with"]) == [0, 2]
    assert "/job:worker" in module.gossip_config(parse(module)).device_filters


@pytest.mark.parametrize("workers, argv, expected", [
    (2, ["--window", "0"], "--window must be at least 1"),
    (1, [], "gossip needs at least two workers")])
def test_bad_input_gets_one_line_and_exit_2(workers, argv, expected, capsys):
    """(What every script without a ps refuses is in test_bad_input.py.)"""
    hosts = ",".join("localhost:%d" % port for port in free_ports(workers))
    assert expected in rejected(load_example(GOSSIP), ["--worker_hosts", hosts] + argv, capsys)

@pytest.mark.parametrize("victim", ["worker2", "worker0"])
def test_a_killed_worker_ends_the_others_within_the_timeout_naming_it(victim):
    """Three workers; one is SIGKILLed. A survivor waits for the dead peer (for its θ, or at the
    end for its "finished") and gives up after --timeout, naming it, with the retryable code:
    every worker must be done before any may leave, and the dead one never will be. worker0 is
    also the one that hands out the start and collects the end."""
    cluster = LocalCluster(example(GOSSIP), workers=3, echo=False, args=[
        "--train_steps", "1000000", "--log_every", "50", "--timeout", AFTER_START_TIMEOUT])
    try:
        cluster.start()
        watch = "worker1"
        assert cluster.wait_for_line(watch, r"step 100 ", 120), output(cluster)
        cluster.kill(victim)
        assert cluster.wait(40, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    survivors = [name for name in ("worker0", "worker1", "worker2") if name != victim]
    assert cluster.returncodes() == dict({victim: -signal.SIGKILL},
                                         **{name: RETRYABLE for name in survivors})
    host = re.escape(cluster.worker_hosts[int(victim[-1])])
    for name in survivors:
        assert re.search(r"\[%s\] error: .*%s \(%s\)" % (name, victim, host),
                         output(cluster, name)), output(cluster)
