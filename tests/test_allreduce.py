"""AllReduce-SGD/: synchronous data parallelism without a ps, on TensorFlow's collective ops.

Every run is a real cluster of worker processes (no ps) on free localhost ports. The exact-update
test uses three workers and a batch of 479 examples, one whole shard of the 1,437 training
images, so that each minibatch gradient is the full-shard gradient: NumPy recomputes every step
from the checkpoints that the chief saved after each one.
"""
import os
import re
import signal

import numpy as np
import pytest

from helpers import (AFTER_START_TIMEOUT, assert_no_process_left, data_and_initial_theta, example,
                    free_ports, load_example, LocalCluster, output, rejected, results_in,
                    run_cluster, run_sh, worker_results)
from test_synchronous import SHARD, assert_parameters_close, gradient

ALLREDUCE = "AllReduce-SGD/AllReduce-SGD.py"
RETRYABLE = 138
NAMES = ["hidden_weights", "hidden_biases", "output_weights", "output_biases"]


@pytest.mark.tf2
def test_run_sh_reaches_accuracy_with_identical_replicas_and_no_ps():
    """`bash run.sh` with its defaults, from another directory: workers only, each makes one
    step per update, and the replicas end identical."""
    text = run_sh(ALLREDUCE)
    results = sorted(results_in(text), key=lambda r: r["task_index"])
    assert [r["task_index"] for r in results] == [0, 1], text
    assert all(r["test_accuracy"] >= 0.93 for r in results), results
    assert [(r["global_step"], r["local_steps"]) for r in results] == [(1000, 1000)] * 2
    assert len({r["replica_checksum"] for r in results}) == 1, results
    assert "[ps0]" not in text and "all 2 workers are done; exiting" in text, text
    assert "allreduce_sgd: 2 worker(s)" in text


@pytest.mark.tf2
def test_one_step_changes_every_replica_by_minus_eta_times_the_mean_gradient(tmp_path):
    """Three workers, two steps, with the scaling rule and a warm-up of two steps: step 0 uses
    η₀, step 1 η₀ + (3·η₀ − η₀)/2. Every replica ends with the same θ as the chief's."""
    base, workers = 0.5, 3
    module = load_example(ALLREDUCE)
    (images, labels), _ = data_and_initial_theta(module, 0)[0]
    shards = [(images[i::workers].astype(np.float64), labels[i::workers])
              for i in range(workers)]
    assert all(len(shard_labels) == SHARD for _, shard_labels in shards)
    log_dir = str(tmp_path / "logs")
    cluster = run_cluster(ALLREDUCE, workers=workers, args=[
        "--train_steps", "2", "--batch_size", str(SHARD), "--log_dir", log_dir,
        "--checkpoint_every", "1", "--learning_rate", str(base), "--scale_learning_rate",
        "--warmup_steps", "2"])
    results = worker_results(cluster)
    assert [(r["global_step"], r["local_steps"]) for r in results] == [(2, 2)] * workers
    assert len({r["replica_checksum"] for r in results}) == 1, results
    thetas = []
    for step in range(3):
        reader = module.tf.train.load_checkpoint(os.path.join(log_dir, "model.ckpt-%d" % step))
        assert reader.get_tensor("global_step") == step
        thetas.append([reader.get_tensor(name).astype(np.float64) for name in NAMES])
    initial = data_and_initial_theta(module)[1]
    assert_parameters_close(thetas[0], initial, [value + 1 for value in initial])
    for rate, before, after in zip([base, base + (3 * base - base) / 2], thetas, thetas[1:]):
        gradients = [gradient(before, shard_images, shard_labels)
                     for shard_images, shard_labels in shards]
        expected = [value - rate * np.mean(parts, axis=0)
                    for value, parts in zip(before, zip(*gradients))]
        assert_parameters_close(after, expected, before)
    assert np.abs(np.concatenate([v.ravel() for v in thetas[-1]])).sum() == pytest.approx(
        results[1]["replica_checksum"], rel=1e-6)


def parse(module, workers=2, extra=()):
    hosts = ",".join("localhost:%d" % port for port in free_ports(workers))
    return module.parse_flags(["--job_name", "worker", "--task_index", "1",
                               "--worker_hosts", hosts] + list(extra))


@pytest.mark.parametrize("script, aggregated", [(ALLREDUCE, 4), ("Synchronous-SGD/ssgd.py", 2)])
@pytest.mark.parametrize("flags, schedule", [
    ([], [0.1] * 5),
    (["--scale_learning_rate"], ["η"] * 5),
    (["--scale_learning_rate", "--warmup_steps", "3"], [0.1, "1/3", "2/3", "η", "η"]),
    (["--warmup_steps", "3"], [0.1] * 5),
])
def test_the_learning_rate_follows_the_linear_scaling_rule_and_its_warm_up(
        script, aggregated, flags, schedule):
    """Four workers, η₀ = 0.1: η = 0.1·M with the scaling rule, M the minibatches averaged per
    update (AllReduce-SGD: all 4; Synchronous-SGD with --replicas_to_aggregate 2: 2), reached
    linearly over W steps."""
    module = load_example(script)
    if script == ALLREDUCE:
        args = parse(module, workers=4, extra=["--learning_rate", "0.1"] + flags)
    else:
        hosts = ",".join("localhost:%d" % port for port in free_ports(5))
        args = module.parse_flags(["--job_name", "worker", "--task_index", "1", "--ps_hosts",
                                   hosts.split(",")[0], "--worker_hosts",
                                   ",".join(hosts.split(",")[1:]), "--replicas_to_aggregate",
                                   "2", "--learning_rate", "0.1"] + flags)
    target = 0.1 * aggregated
    schedule = [{"η": target, "1/3": 0.1 + (target - 0.1) / 3,
                 "2/3": 0.1 + 2 * (target - 0.1) / 3}.get(value, value) for value in schedule]
    tf = module.tf
    with tf.Graph().as_default():
        global_step = tf.Variable(0, dtype=tf.int64)
        rate = module.learning_rate(args, global_step)
        got = []
        with tf.Session() as sess:
            for value in range(5):  # η, read after each update of the global step
                sess.run(global_step.assign(value))
                got.append(sess.run(rate))
    np.testing.assert_allclose(got, schedule, rtol=1e-6)


def test_every_variable_and_op_lives_on_the_workers_own_task():
    module = load_example(ALLREDUCE)
    args = parse(module)
    assert args.cluster["ps"] == [] and len(args.cluster["worker"]) == 2
    tf = module.tf
    with tf.Graph().as_default() as graph:
        module.build_graph(args)
        assert len(tf.global_variables()) == 5  # θᵢ and the step counter
        # (the step counter's initializer has no device of its own: it is colocated with it)
        devices = {(op.device or op.colocation_groups()[0].decode()).partition("/device:")[0]
                   for op in graph.get_operations()}  # (the test set's input: the task's CPU)
        assert devices == {"/job:worker/task:1", "loc:@global_step"}, devices
        collectives = [op for op in graph.get_operations() if op.type == "CollectiveReduce"]
        assert len(collectives) == 3  # the mean gradient, and the broadcasts of θ and the step
        assert {op.get_attr("group_size") for op in collectives} == {2}
        assert len({op.get_attr("instance_key") for op in collectives}) == 3
    config = module.session_config(args)
    assert config.experimental.collective_group_leader == "/job:worker/replica:0/task:0"


def test_a_negative_warmup_gets_one_line_and_exit_2(capsys):
    """(What every script without a ps refuses is in test_bad_input.py.)"""
    hosts = ",".join("localhost:%d" % port for port in free_ports(2))
    assert "--warmup_steps must be 0 or more" in rejected(
        load_example(ALLREDUCE), ["--worker_hosts", hosts, "--warmup_steps", "-1"], capsys)


def test_a_tf_config_with_workers_only_is_a_cluster_without_ps(monkeypatch):
    module = load_example(ALLREDUCE)
    hosts = ["localhost:%d" % port for port in free_ports(2)]
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["%s", "%s"]}, "task": {"type": '
                       '"worker", "index": 1}}' % tuple(hosts))
    args = module.parse_flags([])
    assert args.cluster == {"ps": [], "worker": hosts} and args.task_index == 1


def test_a_killed_group_leader_ends_the_others_within_the_timeout_naming_it():
    """A collective op waits for a dead peer for good; the watchdog ends each survivor after
    --timeout, naming the peer, with the retryable code. The victim is worker0, which also
    leads the collective group (worker1 killed: tests/test_reliability.py's matrix)."""
    victim, survivor = "worker0", "worker1"
    cluster = LocalCluster(example(ALLREDUCE), workers=2, echo=False, args=[
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
