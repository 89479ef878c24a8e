"""Pipe-SGD/: all-reduce SGD pipelined with width 2, every update one step stale.

Every run is a real cluster of worker processes (no ps) on free localhost ports, except the
one-worker test, which runs the script's graph on a server in this process so that it can fetch
each step's minibatch and gradient. The three-worker exact-update test uses batches of 479
examples, one whole shard of the 1,437 training images, so that each minibatch gradient is the
full-shard gradient: NumPy recomputes every step from the checkpoints the chief saved after each.
"""
import os
import re
import signal

import numpy as np
import pytest

from helpers import (AFTER_START_TIMEOUT, assert_no_process_left, data_and_initial_theta, example,
                    free_ports, load_example, LocalCluster, output, rejected, results_in,
                    run_cluster, run_sh, worker_results)
from test_asynchronous import SERVERS
from test_fidelity import ancestors
from test_synchronous import SHARD, assert_parameters_close, gradient

PIPE_SGD = "Pipe-SGD/Pipe-SGD.py"
RETRYABLE = 138
NAMES = ["hidden_weights", "hidden_biases", "output_weights", "output_biases"]


@pytest.mark.tf2
def test_run_sh_reaches_accuracy_with_identical_replicas_and_no_ps():
    """`bash run.sh` with its defaults, from another directory: workers only, one step per
    update each, and the replicas end identical."""
    text = run_sh(PIPE_SGD)
    results = sorted(results_in(text), key=lambda r: r["task_index"])
    assert [r["task_index"] for r in results] == [0, 1], text
    assert all(r["test_accuracy"] >= 0.93 for r in results), results
    assert [(r["global_step"], r["local_steps"]) for r in results] == [(1000, 1000)] * 2
    assert len({r["replica_checksum"] for r in results}) == 1, results
    assert "[ps0]" not in text and "all 2 workers are done; exiting" in text, text
    assert "pipe_sgd: 2 worker(s)" in text


@pytest.mark.tf2
def test_every_update_applies_the_mean_gradient_of_the_step_before(tmp_path):
    """Three workers, four steps: θ₁ = θ₀ (nothing in flight yet), then
    θₜ₊₁ = θₜ − η·mean gⱼ(θₜ₋₁). From step 2 on the fresh gradient gⱼ(θₜ) would give another
    θ, measurably: the test tells the two rules apart."""
    rate, workers, steps = 0.5, 3, 4
    module = load_example(PIPE_SGD)
    (images, labels), _ = data_and_initial_theta(module, 0)[0]
    shards = [(images[i::workers].astype(np.float64), labels[i::workers])
              for i in range(workers)]
    assert all(len(shard_labels) == SHARD for _, shard_labels in shards)
    log_dir = str(tmp_path / "logs")
    cluster = run_cluster(PIPE_SGD, workers=workers, args=[
        "--train_steps", str(steps), "--batch_size", str(SHARD), "--log_dir", log_dir,
        "--checkpoint_every", "1", "--learning_rate", str(rate)])
    results = worker_results(cluster)
    assert [(r["global_step"], r["local_steps"]) for r in results] == [(steps, steps)] * workers
    assert len({r["replica_checksum"] for r in results}) == 1, results
    thetas = []
    for step in range(steps + 1):
        reader = module.tf.train.load_checkpoint(os.path.join(log_dir, "model.ckpt-%d" % step))
        assert reader.get_tensor("global_step") == step
        thetas.append([reader.get_tensor(name).astype(np.float64) for name in NAMES])
    initial = data_and_initial_theta(module)[1]
    assert_parameters_close(thetas[0], initial, [value + 1 for value in initial])
    np.testing.assert_array_equal(np.concatenate([v.ravel() for v in thetas[1]]),
                                  np.concatenate([v.ravel() for v in thetas[0]]))

    def mean_gradient(theta):
        parts = [gradient(theta, shard_images, shard_labels)
                 for shard_images, shard_labels in shards]
        return [np.mean(part, axis=0) for part in zip(*parts)]

    for step in range(1, steps):
        stale = mean_gradient(thetas[step - 1])
        expected = [value - rate * g for value, g in zip(thetas[step], stale)]
        assert_parameters_close(thetas[step + 1], expected, thetas[step])
        if step >= 2:
            fresh = [value - rate * g for value, g in zip(thetas[step],
                                                          mean_gradient(thetas[step]))]
            assert max(np.abs(f - e).max() for f, e in zip(fresh, expected)) > 1e-4
    assert np.abs(np.concatenate([v.ravel() for v in thetas[-1]])).sum() == pytest.approx(
        results[1]["replica_checksum"], rel=1e-6)


@pytest.mark.tf2
def test_one_worker_applies_the_gradient_of_its_previous_minibatch():
    """One worker, its own input pipeline, twelve steps on a server in this process: each
    step's gradient is NumPy's at θₜ on the minibatch that step drew, and θ moves by −η times
    the gradient of the step before (nothing at step 0). A read of the gradient in flight that
    saw the assignment of this step's gradient would apply a fresh gradient here."""
    module = load_example(PIPE_SGD)
    tf = module.tf
    port = free_ports(1)[0]
    args = module.parse_flags(["--job_name", "worker", "--task_index", "0", "--worker_hosts",
                               "localhost:%d" % port, "--learning_rate", "0.3"])
    server = tf.train.Server(tf.train.ClusterSpec(args.cluster), job_name="worker",
                             task_index=0, config=module.session_config(args))
    SERVERS.append(server)
    graph = tf.Graph()
    with graph.as_default():
        built = module.build_graph(args)
        initialize = [tf.global_variables_initializer(), tf.local_variables_initializer()]
    with tf.Session(server.target, graph=graph, config=module.session_config(args)) as sess:
        sess.run(initialize)
        sess.run(built["broadcast"])
        theta, previous = sess.run(built["params"]), None
        for step in range(12):
            global_step, fresh, images, labels = sess.run([
                built["train_op"], built["gradient"], built["images"], built["labels"]])
            after = sess.run(built["params"])
            assert global_step == step + 1
            expected_fresh = np.concatenate([g.ravel() for g in gradient(
                [v.astype(np.float64) for v in theta], images.astype(np.float64), labels)])
            np.testing.assert_allclose(fresh, expected_fresh, rtol=1e-4, atol=1e-6)
            moved = np.concatenate([(a - b).ravel() for a, b in zip(after, theta)])
            if previous is None:
                assert not moved.any(), "step 0 applies nothing"
            else:
                np.testing.assert_allclose(moved, -args.learning_rate * previous, rtol=1e-4,
                                           atol=1e-6)
                assert np.abs(moved + args.learning_rate * fresh).max() > 1e-4
            np.testing.assert_array_equal(sess.run(built["in_flight"]), fresh)
            theta, previous = after, fresh


def parse(module, workers=2, extra=()):
    hosts = ",".join("localhost:%d" % port for port in free_ports(workers))
    return module.parse_flags(["--job_name", "worker", "--task_index", "1",
                               "--worker_hosts", hosts] + list(extra))


@pytest.mark.tf2
def test_everything_lives_on_the_workers_own_task_and_the_all_reduce_waits_for_no_gradient():
    """θᵢ and the step counter are global variables of this worker, the gradient in flight a
    local one; every op is on the worker's own task. The all-reduce of the stale gradient does
    not depend on this step's backward pass (that is the pipeline); the gradient goes in flight
    after the all-reduce, and the update after both."""
    module = load_example(PIPE_SGD)
    args = parse(module)
    assert args.cluster["ps"] == [] and len(args.cluster["worker"]) == 2
    tf = module.tf
    with tf.Graph().as_default() as graph:
        built = module.build_graph(args)
        assert sorted(v.op.name for v in tf.global_variables()) == sorted(NAMES + [
            "global_step"])
        assert [v.op.name for v in tf.local_variables()] == ["gradient_in_flight"]
        assert all(v.device == "/job:worker/task:1" for v in tf.local_variables())
        devices = {(op.device or op.colocation_groups()[0].decode()).partition("/device:")[0]
                   for op in graph.get_operations()}  # (the test set's input: the task's CPU)
        assert devices == {"/job:worker/task:1", "loc:@global_step"}, devices
        collectives = [op for op in graph.get_operations() if op.type == "CollectiveReduce"]
        assert len(collectives) == 3  # the stale gradient, and the broadcasts of θ and the step
        assert {op.get_attr("group_size") for op in collectives} == {2}
        assert len({op.get_attr("instance_key") for op in collectives}) == 3
        [stale] = [op for op in collectives if op.get_attr("instance_key") == 3]
        assert stale.get_attr("final_op") == b"Div"
        assert not [name for name in ancestors(stale) if name.startswith("gradients")]
        # This step's gradient goes in flight only once the all-reduce has read the last one.
        [send_next] = [op for op in graph.get_operations() if op.type == "AssignVariableOp"
                       and op.inputs[0].op.name == "gradient_in_flight"
                       and not op.name.startswith("gradient_in_flight/")]
        assert stale.name in ancestors(send_next)
        update = ancestors(built["train_op"].op)
        assert send_next.name in update
        assert stale.name in update and any(name.startswith("gradients") for name in update)
    config = module.session_config(args)
    assert config.experimental.collective_group_leader == "/job:worker/replica:0/task:0"


def test_a_ps_in_the_cluster_gets_one_line_and_exit_2(capsys):
    """(What every script without a ps refuses is in test_bad_input.py.)"""
    hosts = ["localhost:%d" % port for port in free_ports(3)]
    assert "no parameter server" in rejected(
        load_example(PIPE_SGD), ["--ps_hosts", hosts[0], "--worker_hosts", ",".join(hosts[1:])],
        capsys)


def test_a_killed_worker_ends_the_others_within_the_timeout_naming_it():
    """As in AllReduce-SGD: an all-reduce waits for a dead peer for good; the watchdog ends the
    survivor after --timeout, naming the peer, with the retryable code. The victim is worker1
    (the group leader, worker0, killed: tests/test_reliability.py's matrix)."""
    victim, survivor = "worker1", "worker0"
    cluster = LocalCluster(example(PIPE_SGD), workers=2, echo=False, args=[
        "--train_steps", "1000000", "--log_every", "50", "--timeout", AFTER_START_TIMEOUT])
    try:
        cluster.start()
        assert cluster.wait_for_line(victim, r"step 100 ", 120), output(cluster)
        cluster.kill(victim)
        assert cluster.wait(30, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert cluster.returncodes() == {victim: -signal.SIGKILL, survivor: RETRYABLE}
    assert re.search(r"\[%s\] error: .*%s \(%s\)" % (survivor, victim, re.escape(
        cluster.worker_hosts[int(victim[-1])])), output(cluster, survivor)), output(cluster)
