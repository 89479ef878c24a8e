"""Distributed-Setup/: dist_setup.py (MonitoredTrainingSession) and dist_setup_sup.py (Supervisor)."""
import glob
import json
import os
import random
import socket
import threading
import time

import pytest

from helpers import (LocalCluster, assert_no_process_left, example, free_ports,
                     last_checkpoint_step, load_example, output, run_cluster, worker_results)

SCRIPTS = ["Distributed-Setup/dist_setup.py", "Distributed-Setup/dist_setup_sup.py"]


@pytest.mark.tf2
@pytest.mark.parametrize("script", SCRIPTS)
def test_one_worker_reaches_accuracy_and_every_task_exits_0(script):
    cluster = run_cluster(script, workers=1)
    [result] = worker_results(cluster)
    assert result["test_accuracy"] >= 0.95
    assert result["global_step"] == result["local_steps"] == 1000
    assert "all 1 worker is done" in output(cluster, "ps0")
    for key in ("algorithm", "job", "task_index", "workers", "global_step", "local_steps",
                "train_loss", "test_accuracy", "wall_seconds", "steps_per_second"):
        assert result[key] is not None, key


@pytest.mark.parametrize("script", SCRIPTS)
def test_global_step_counts_every_workers_updates(script):
    # Every worker is held to 50 steps/s: holding the chief alone (UNHURRIED_CHIEF) is not
    # enough with three, since two unhindered workers made all 600 steps in a CI-loaded run
    # before the third had made its session.
    cluster = run_cluster(script, workers=3, args=["--train_steps", "600", "--step_delay",
                                                   "0.02"], chief_last=True)
    results = worker_results(cluster)
    assert all(r["local_steps"] > 0 for r in results), "every worker trained"
    # Every local step applied one update on the ps; the last worker to finish saw them all.
    assert max(r["global_step"] for r in results) == sum(r["local_steps"] for r in results)
    assert 600 <= max(r["global_step"] for r in results) < 600 + 3


@pytest.mark.tf2
def test_variables_live_on_the_ps_and_gradients_run_on_the_worker():
    module = load_example(SCRIPTS[0])
    ps, worker0, worker1 = ("localhost:%d" % port for port in free_ports(3))
    args = module.parse_flags(["--job_name", "worker", "--task_index", "1", "--ps_hosts", ps,
                               "--worker_hosts", "%s,%s" % (worker0, worker1)])
    with module.tf.Graph().as_default() as graph:
        built = module.build_graph(args)
        variables = module.tf.global_variables()
        assert len(variables) == 5  # four parameters and the global step
        assert all(v.device == "/job:ps/task:0" for v in variables), [v.device for v in variables]
        gradient_ops = [op for op in graph.get_operations() if op.name.startswith("gradients")]
        assert gradient_ops
        assert all(op.device == "/job:worker/task:1" for op in gradient_ops)
        assert built["loss"].device == "/job:worker/task:1"


def tensors_between_ps_and_worker(fetches):
    """The names of the tensors that one run of `fetches` (a tensor or a tuple of them) sends
    from a ps to a worker or back: TensorFlow 1.x sends each as its own RPC."""
    fetches = fetches if isinstance(fetches, (tuple, list)) else [fetches]
    crossing, seen, stack = set(), set(), [fetch.op for fetch in fetches]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        for tensor in op.inputs:
            if ("/job:ps" in tensor.op.device) != ("/job:ps" in op.device):
                crossing.add(tensor.name)
            stack.append(tensor.op)
        stack.extend(op.control_inputs)
    return crossing


@pytest.mark.tf2
@pytest.mark.parametrize("script", SCRIPTS + [
    "Hogwild/Hogwild.py", "Multiple-GPUs-Single-Machine/dist_mult_gpu_sing_mach.py",
    "Staleness-Aware-SGD/Staleness-Aware-SGD.py"])
def test_a_step_moves_theta_in_one_message_and_the_gradient_in_one(script):
    module = load_example(script)
    ps, worker0, worker1 = ("localhost:%d" % port for port in free_ports(3))
    args = module.parse_flags(["--job_name", "worker", "--task_index", "1", "--ps_hosts", ps,
                               "--worker_hosts", "%s,%s" % (worker0, worker1)])
    with module.tf.Graph().as_default():
        built = module.build_graph(args)
        crossing = tensors_between_ps_and_worker(built["train_op"])
    # θ packed on the ps (a concat there), g packed on the worker; the four variables would
    # otherwise be eight tensors, eight RPCs per step (and the constant 1 of the global step's
    # increment, made on the worker, a ninth).
    assert len(crossing) == 2, sorted(crossing)


@pytest.mark.tf2
@pytest.mark.parametrize("script", SCRIPTS + [
    "Hogwild/Hogwild.py", "Multiple-GPUs-Single-Machine/dist_mult_gpu_sing_mach.py"])
def test_the_global_step_increment_is_locked(script):
    """Workers increment the global step at the same moments, and the ps runs their steps on
    two threads: an unlocked AssignAdd can lose one of two simultaneous increments. (It did:
    3 workers made 603 steps and the global step said 602.)"""
    module = load_example(script)
    ps, worker0, worker1 = ("localhost:%d" % port for port in free_ports(3))
    args = module.parse_flags(["--job_name", "worker", "--task_index", "1", "--ps_hosts", ps,
                               "--worker_hosts", "%s,%s" % (worker0, worker1)])
    with module.tf.Graph().as_default():
        increment = module.build_graph(args)["train_op"].op
    assert increment.device.startswith("/job:ps"), increment.device
    # A ref variable's AssignAdd locks only when asked; a resource variable's always does.
    assert (increment.type == "AssignAdd" and increment.get_attr("use_locking")
            or increment.type == "AssignAddVariableOp"), increment.node_def


@pytest.mark.tf2
def test_tf_config_replaces_the_cluster_flags():
    cluster = LocalCluster(example(SCRIPTS[0]), workers=2, echo=False)
    spec = {"ps": cluster.ps_hosts, "worker": cluster.worker_hosts}
    try:
        for task in cluster.tasks:
            tf_config = json.dumps({"cluster": spec, "task": {"type": task.job,
                                                              "index": task.index}})
            cluster.start_task(task, [cluster.python, cluster.script, "--train_steps", "300"],
                               env={"TF_CONFIG": tf_config})
        assert cluster.wait(120), output(cluster)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert set(cluster.returncodes().values()) == {0}, output(cluster)
    assert [r["task_index"] for r in worker_results(cluster)] == [0, 1]


def test_a_late_non_chief_does_not_wait_for_a_fixed_interval():
    """TensorFlow's own non-chief waits 30 s between readiness checks; ours wakes up when the
    chief closes the ready queue. Started first, worker1 must join while training is young."""
    cluster = LocalCluster(example(SCRIPTS[0]), workers=2, echo=False,
                           args=["--train_steps", "3000", "--log_every", "100"])
    try:
        cluster.start(["ps0", "worker1"])
        cluster.start(["worker0"])
        assert cluster.wait(120), output(cluster)
    finally:
        cluster.stop()
    worker0, worker1 = worker_results(cluster)
    assert worker1["first_global_step"] < 1500, worker1
    assert worker1["local_steps"] > 500, worker1


@pytest.mark.parametrize("script", SCRIPTS)
def test_log_dir_writes_summaries_and_a_killed_run_resumes(script, tmp_path):
    log_dir = str(tmp_path / "logs")
    args = ["--train_steps", "1500", "--checkpoint_every", "200", "--log_every", "100",
            "--log_dir", log_dir]
    cluster = LocalCluster(example(script), workers=1, args=args, echo=False)
    try:
        cluster.start()
        assert cluster.wait_for(lambda: last_checkpoint_step(log_dir) >= 200, 120), output(
            cluster)
        cluster.kill("worker0")
        cluster.kill("ps0")
    finally:
        cluster.stop()
    last = last_checkpoint_step(log_dir)
    assert last >= 200
    [result] = worker_results(run_cluster(script, workers=1, args=args))
    assert result["first_global_step"] >= last, "resumed from the last checkpoint"
    assert result["global_step"] == 1500
    assert result["local_steps"] == 1500 - result["first_global_step"]
    # 1500 is no multiple of --checkpoint_every: the chief saves once more at --train_steps.
    assert last_checkpoint_step(log_dir) == 1500
    assert {"loss", "test_accuracy"} <= summary_tags(os.path.join(log_dir, "worker0"))


def summary_tags(folder):
    """The scalar tags TensorBoard will show of one run, a worker's folder in --log_dir (the
    killed run's file may end mid-record)."""
    tf = load_example(SCRIPTS[0]).tf
    tags = set()
    for path in glob.glob(os.path.join(folder, "events.out.tfevents.*")):
        try:
            for event in tf.train.summary_iterator(path):
                tags.update(value.tag for value in event.summary.value)
        except tf.errors.DataLossError:
            pass
    return tags


@pytest.mark.parametrize("script", SCRIPTS)
def test_without_log_dir_nothing_is_written_and_nothing_resumes(script):
    folder = os.path.dirname(example(script))
    before = sorted(os.listdir(folder))
    for _ in range(2):
        [result] = worker_results(run_cluster(script, workers=1,
                                              args=["--train_steps", "200"]))
        assert result["first_global_step"] == 0
    assert sorted(os.listdir(folder)) == before


def test_the_ps_counts_every_worker_that_says_done_and_leaves_at_once(capsys):
    """The ps's side of the status queue, in this process: eight workers say "started", then
    "done" and close their port straight away, at random moments. The ps must count every one
    and return 0. Every example shares this helper. (The CI failure that led to it: the ps used
    to poll with a dequeue that timed out every 0.5 s, and in TF 1.x such a dequeue can take
    the item that arrives as it times out, so a worker that had finished was reported as
    "stopped without finishing". That window is too narrow to hit on purpose here; the ps no
    longer has one, since it dequeues only what queue.size() has counted.)"""
    module = load_example("Distributed-Setup/dist_setup.py")
    tf = module.tf
    ps_port, *worker_ports = free_ports(9)
    listeners = []
    for port in worker_ports:  # stand-ins for the workers' servers: the ps watches their ports
        listener = socket.socket()
        listener.bind(("localhost", port))
        listener.listen(64)  # never accepted: room for the ps's looks (5 a second) until closed
        listeners.append(listener)
    args = module.parse_flags([
        "--job_name", "ps", "--task_index", "0", "--timeout", "30",
        "--ps_hosts", "localhost:%d" % ps_port,
        "--worker_hosts", ",".join("localhost:%d" % port for port in worker_ports)])
    server = tf.train.Server(tf.train.ClusterSpec(args.cluster), job_name="ps", task_index=0,
                             config=module.session_config(args))
    returned = []
    ps = threading.Thread(target=lambda *task: returned.append(module.run_parameter_server(*task)),
                          args=(args, server), daemon=True)
    ps.start()
    with tf.Graph().as_default():
        index, status = tf.placeholder(tf.int32, []), tf.placeholder(tf.string, [])
        say = module.status_queues(args.cluster)[0].enqueue((index, status))
        with tf.Session(server.target, config=tf.ConfigProto(device_filters=["/job:ps"])) as sess:
            order = list(range(len(worker_ports)))
            random.Random(0).shuffle(order)
            for worker in order:
                sess.run(say, {index: worker, status: b"started"})
            for worker in order:
                time.sleep(random.Random(worker).uniform(0, 0.5))  # when each one ends
                sess.run(say, {index: worker, status: b"done"})
                listeners[worker].close()
    ps.join(timeout=20)
    del server  # stop it now: at interpreter exit TF 1.15's Server.__del__ prints a traceback
    assert not ps.is_alive(), "the ps did not return within 20 s of the last worker leaving"
    assert returned == [0], capsys.readouterr()
    assert "all 8 workers are done" in capsys.readouterr().out
