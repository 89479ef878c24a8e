"""Test helpers shared by every example's tests: real clusters on free localhost ports."""
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from launch import RESULT_PATTERN, LocalCluster, free_ports, results_table  # noqa: E402,F401

# Every example script's run.sh, and the launcher, need no more than this to finish a short run.
RUN_TIMEOUT = 120


def tf_major_version():
    import tensorflow
    return int(tensorflow.__version__.split(".")[0])


def example(relative_path):
    return os.path.join(ROOT, relative_path)


def has_parameter_servers(path):
    """Whether an example runs with a ps: every one does, except a script whose lesson sets
    PARAMETER_SERVERS = 0 (its workers exchange among themselves, as AllReduce-SGD's)."""
    return "\nPARAMETER_SERVERS = 0" not in open(os.path.join(ROOT, path)).read()


def load_example(relative_path):
    """Import an example script as a module (for its flag parsing and graph building)."""
    path = example(relative_path)
    name = "example_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rejected(module, argv, capsys):
    """The one-line error with which the script's flag parsing refuses argv (exit code 2)."""
    import pytest
    with pytest.raises(SystemExit) as exit_info:
        module.parse_flags(argv)
    error = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(error.strip().splitlines()) == 1, error
    return error


def assert_no_process_left(cluster):
    """Every task's process group is gone: nothing the cluster started is still running."""
    for task in cluster.tasks:
        if task.process is None:
            continue
        try:
            os.killpg(task.process.pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError("%s (process group %d) is still running" % (task.name,
                                                                         task.process.pid))


def output(cluster, name=None):
    tasks = cluster.tasks if name is None else [cluster.task(name)]
    return "\n".join("[%s] %s" % (task.name, line) for task in tasks for line in task.lines)


def listening(host):
    name, _, port = host.rpartition(":")
    try:
        socket.create_connection((name, int(port)), timeout=1.0).close()
        return True
    except OSError:
        return False


# The chief's flags in a test that needs every worker to train: once θ is ready, a waiting
# worker still makes its session before its first step, and on CI's loaded 2 cores that took
# longer than the chief's 1000 unhindered steps (~2 s: a run saw worker1 make none). At 10 ms a
# step the chief alone would need 10 s; a worker that waited for a 30 s poll would still miss it.
UNHURRIED_CHIEF = ["--step_delay", "0.01"]

# --timeout of a test that kills or cuts a task once the cluster trains: the survivors wait that
# long for it (idle), and the cluster's start must fit in it too. 10 s did not always: in a
# fresh-clone CI run on the 2 cores, neither worker of a 3-task cluster had reported to the ps
# 10 s after the ps started, and the ps gave them up as never come up.
AFTER_START_TIMEOUT = "20"


def start_the_chief_last(cluster):
    """Start the ps and the other workers, and the chief once their servers listen: they then
    wait for the chief's θ and all start training together, so that on a busy machine no worker
    misses a short run because the others finished it before it had imported TensorFlow (give
    the chief UNHURRIED_CHIEF too where every worker must train)."""
    cluster.start([task.name for task in cluster.tasks if task.name != "worker0"])
    assert wait_until(lambda: cluster.failed() or all(map(listening, cluster.worker_hosts[1:])),
                      RUN_TIMEOUT) and not cluster.failed(), output(cluster)
    cluster.start(["worker0"])


def wait_until(condition, seconds):
    """Whether condition() became true within `seconds`, checked every 0.05 s: for what sends
    no event (a port that opens, a gradient taken on a ps)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def sent_between_tasks(tf, session, fetches):
    """{(from task, to task): the names of the tensors sent}, from the partition graphs that
    TensorFlow ran for one session.run of fetches (tasks as "/job:ps/task:0")."""
    metadata = tf.RunMetadata()
    session.run(fetches, options=tf.RunOptions(output_partition_graphs=True),
                run_metadata=metadata)
    task = lambda device: device.split("/device:")[0].replace("/replica:0", "")
    sent = {}
    for partition in metadata.partition_graphs:
        for node in partition.node:
            if node.op == "_Send":
                route = (task(node.attr["send_device"].s.decode()),
                         task(node.attr["recv_device"].s.decode()))
                sent.setdefault(route, []).append(node.attr["tensor_name"].s.decode())
    return sent


def run_cluster(relative_path, workers=2, args=(), timeout=RUN_TIMEOUT, chief_last=False,
                **options):
    """Run an example to the end; assert that every task exited 0 and return the cluster.
    chief_last: see start_the_chief_last."""
    cluster = LocalCluster(example(relative_path), workers=workers, args=args, echo=False,
                           **options)
    try:
        if chief_last:
            start_the_chief_last(cluster)
        else:
            cluster.start()
        assert cluster.wait(timeout), "not finished in %d s, or a task failed: %s\n%s" % (
            timeout, cluster.returncodes(), output(cluster))
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert all(code == 0 for code in cluster.returncodes().values()), (
        "%s\n%s" % (cluster.returncodes(), output(cluster)))
    return cluster


def run_sh(relative_path, cwd=ROOT):
    """The output of `bash run.sh` with its defaults (relative_path: an example's script), every
    process having exited 0. On TensorFlow 2.x, the cluster that run.sh starts (the launcher's
    defaults) from the zygote instead, and the launcher's results table: the launcher and
    run.sh do not depend on TensorFlow (test_launcher.py runs them on 2.x), and each real
    process would import TensorFlow 2.x again, 4-5 s of CPU per task."""
    if tf_major_version() < 2:
        code, text = run_script(["bash", os.path.join(os.path.dirname(example(relative_path)),
                                                      "run.sh")], cwd=cwd)
        assert code == 0, text
        return text
    started = time.monotonic()
    cluster = run_cluster(relative_path)
    return "\n".join([line for task in cluster.tasks for line in task.lines]
                     + [results_table(cluster.tasks, time.monotonic() - started)])


def run_and_kill(relative_path, victim, args, workers=2, watch="worker0", after=r"step 50 ",
                 bound=RUN_TIMEOUT, env=None):
    """Start an example, SIGKILL the victim task once `watch` prints `after`, then wait up to
    `bound` seconds for the others to end. Returns (cluster, whether all ended); nothing the
    cluster started is left running."""
    cluster = LocalCluster(example(relative_path), workers=workers, args=args, echo=False,
                           env=env)
    try:
        cluster.start()
        assert cluster.wait_for_line(watch, after, bound), output(cluster)
        cluster.kill(victim)
        ended = cluster.wait(bound, stop_on_failure=False)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    return cluster, ended


def last_checkpoint_step(log_dir):
    """The global step of the checkpoint that a restart resumes from: the one the "checkpoint"
    state file names. TensorFlow writes that file after the checkpoint's data, index and meta
    files, so a run killed in between resumes from the checkpoint before. -1 if none yet."""
    try:
        text = open(os.path.join(log_dir, "checkpoint")).read()
    except FileNotFoundError:
        return -1
    found = re.search(r'^model_checkpoint_path: ".*-(\d+)"$', text, re.MULTILINE)
    return int(found.group(1)) if found else -1


def worker_results(cluster):
    results = sorted((r for r in cluster.results() if r["job"] == "worker"),
                     key=lambda r: r["task_index"])
    assert len(results) == sum(task.job == "worker" for task in cluster.tasks), output(cluster)
    return results


def results_in(text):
    """The RESULT dicts in a task's or a launcher's output."""
    return [json.loads(match.group(2)) for match in map(RESULT_PATTERN.match, text.splitlines())
            if match]


def run_script(args, timeout=RUN_TIMEOUT, env=None, cwd=None):
    """Run a command to the end in its own process group; returns (exit code, output).

    A run.sh it starts uses the interpreter that runs the tests (TensorFlow 1.x or 2.x), not
    whichever environment the clone has."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    env.setdefault("PYTHON", sys.executable)
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True,
                               env=env)
    try:
        text, _ = process.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(process.pid, 9)
        except ProcessLookupError:
            pass
    return process.returncode, text.decode("utf-8", "replace")


def data_and_initial_theta(module, seed=0):
    """An example's digits, ((train_images, train_labels), (test_images, test_labels)), and
    its initial θ in float64, as the script's Model (your load_data and model) makes them."""
    import argparse
    import numpy as np
    tf = module.tf
    with tf.Graph().as_default():
        net = module.Model(argparse.Namespace(dataset="digits", seed=seed, payload_mb=0.0))
        theta = net.parameters()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            values = sess.run(theta)
    data = (net.train_images, net.train_labels), (net.test_images, net.test_labels)
    return data, [value.astype(np.float64) for value in values]
