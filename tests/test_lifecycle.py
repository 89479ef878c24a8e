"""Recovery, as a cluster manager sees it: a task killed (or frozen) and started again with the
same command line, what --log_dir must refuse and what it must survive, and the exit codes an
engine acts on (0 done, 2 bad input, 1 permanent, 138 "a peer was lost: start me again")."""
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import types

import pytest

from helpers import (AFTER_START_TIMEOUT, RUN_TIMEOUT, LocalCluster, assert_no_process_left,
                     example, free_ports, last_checkpoint_step, load_example, output, run_script,
                     worker_results)

RETRYABLE = 138
TIMEOUT = "10"  # --timeout of every run here


def start(script, args, workers=2):
    cluster = LocalCluster(example(script), workers=workers, echo=False,
                           args=["--log_every", "50", "--timeout", TIMEOUT] + list(args))
    cluster.start()
    return cluster


def kill_and_restart(cluster, name):
    """SIGKILL one task, then start it again with its own command line (what Kubernetes'
    restartPolicy OnFailure does). Returns the output it printed before it was killed."""
    task = cluster.task(name)
    cluster.kill(name)
    task.process.wait()
    before = list(task.lines)
    cluster.start_task(task, cluster.command(task))
    return before


def global_steps(lines):
    return [int(step) for step in re.findall(r"\(global (\d+)\)", "\n".join(lines))]


def finish(cluster, bound=RUN_TIMEOUT):
    try:
        ended = cluster.wait(bound, stop_on_failure=False)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert ended, output(cluster)
    return cluster


@pytest.mark.tf2
def test_a_restarted_chief_joins_the_live_theta_and_the_run_completes():
    """AGN: θᵢ and θᵢ at pull are local variables, re-made by the restarted chief's
    local_init_op; θ on the ps is joined, not re-initialized (the restart columns of
    test_reliability.py do the same for other kinds of lesson). The ps gives a worker whose
    port closed --timeout seconds to be started again: a restart on a loaded machine (TF 2.x's
    import alone) can take more than this file's 10 s, so this run gives 30. --step_delay holds
    each worker to 50 steps/s, so that worker 0 cannot end the run alone before a worker 1
    started late on a busy machine has made its 200 steps (seen in 6 test processes on 2
    cores: worker 1 made 85 steps, at 12 steps/s, while worker 0 made 1920)."""
    cluster = start("AGN/AGN.py", ["--train_steps", "2000", "--timeout", "30",
                                   "--step_delay", "0.02"])
    try:
        assert cluster.wait_for_line("worker1", r"step 200 ", RUN_TIMEOUT), output(cluster)
        before = kill_and_restart(cluster, "worker0")
        killed_at = max(global_steps(before) + [0])
    finally:
        finish(cluster)
    assert cluster.returncodes() == {"ps0": 0, "worker0": 0, "worker1": 0}, output(cluster)
    chief, other = worker_results(cluster)
    assert "θ is live on the ps at global step" in output(cluster, "worker0"), output(cluster)
    # Nothing went backwards: the restarted chief started from the live global step, and the
    # other worker's global step only ever grew.
    assert chief["first_global_step"] >= killed_at, (chief, killed_at)
    steps = global_steps(cluster.task("worker1").lines)
    assert steps == sorted(steps), steps
    assert min(chief["global_step"], other["global_step"]) >= 2000
    assert chief["test_accuracy"] >= 0.9, chief


def test_a_ps_that_never_comes_up_is_named_as_such():
    cluster = LocalCluster(example("Hogwild/Hogwild.py"), workers=1, echo=False,
                           args=["--timeout", "3"])
    cluster.start(["worker0"])
    finish(cluster, bound=60)
    assert cluster.task("worker0").returncode == RETRYABLE, output(cluster)
    assert re.search(r"ps0 \(\S+\) never came up", output(cluster)), output(cluster)


def test_a_frozen_worker_is_named_by_the_ps_and_the_run_ends():
    """SIGSTOP: the process lives and its port accepts connections, but it says nothing."""
    cluster = start("Hogwild/Hogwild.py", ["--train_steps", "3000"])
    try:
        assert cluster.wait_for_line("worker0", r"step 100 ", RUN_TIMEOUT), output(cluster)
        cluster.kill("worker1", signal.SIGSTOP)
        ended = cluster.wait_for(lambda: None not in (cluster.task("ps0").returncode,
                                                      cluster.task("worker0").returncode), 90)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert ended, output(cluster)
    assert cluster.task("worker0").returncode == 0, output(cluster)
    assert cluster.task("ps0").returncode == 1, output(cluster)
    assert re.search(r"worker1 \(\S+\) stopped answering: no heartbeat", output(cluster, "ps0")), \
        output(cluster)


def test_the_ps_blames_the_frozen_worker_first_not_the_chief_that_gave_up_on_it():
    """Synchronous-SGD: the chief cannot finish without the frozen worker's gradients, so it
    exits with the retryable code after --timeout, pointing to the ps's log; the ps has lost
    both by then, and its last line names the frozen worker first, the chief after it."""
    cluster = start("Synchronous-SGD/ssgd.py", ["--train_steps", "100000",
                                                "--timeout", AFTER_START_TIMEOUT])
    try:
        assert cluster.wait_for_line("worker1", r"step 100 ", RUN_TIMEOUT), output(cluster)
        cluster.kill("worker1", signal.SIGSTOP)
        ended = cluster.wait_for(lambda: None not in (cluster.task("ps0").returncode,
                                                      cluster.task("worker0").returncode), 90)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert ended, output(cluster)
    assert cluster.task("worker0").returncode == RETRYABLE, output(cluster)
    assert "the ps's log names the one it no longer hears from" in output(cluster, "worker0")
    assert cluster.task("ps0").returncode == 1, output(cluster)
    assert re.search(r"error: worker1 \(\S+\) stopped without finishing first \(frozen or cut "
                     r"off\), then worker0 \(\S+\) \(its port closed\); 0 of 2 workers finished",
                     output(cluster, "ps0")), output(cluster)


@pytest.mark.parametrize("script", ["Hogwild/Hogwild.py", "Synchronous-SGD/ssgd.py"])
def test_a_frozen_ps_is_named_by_every_worker_within_the_timeout(script):
    """SIGSTOP the ps: its port still accepts connections, so only progress can tell. Every
    worker must say that the ps accepts connections but does not answer, and exit with the
    retryable code within --timeout (and a few seconds to find out why), not wait forever;
    Synchronous-SGD's chief too, whose aggregation times out first (it once blamed a worker)."""
    cluster = start(script, ["--train_steps", "100000"])
    try:
        assert cluster.wait_for_line("worker1", r"step 100 ", RUN_TIMEOUT), output(cluster)
        cluster.kill("ps0", signal.SIGSTOP)
        frozen_at = time.monotonic()
        ended = cluster.wait_for(lambda: all(
            cluster.task(name).returncode is not None for name in ("worker0", "worker1")),
            float(TIMEOUT) + 30)
        took = time.monotonic() - frozen_at
    finally:
        cluster.kill("ps0", signal.SIGCONT)
        cluster.stop()
    assert_no_process_left(cluster)
    assert ended, output(cluster)
    for name in ("worker0", "worker1"):
        assert cluster.task(name).returncode == RETRYABLE, output(cluster)
        assert re.search(r"lost the parameter server: ps0 \(\S+\) accepts connections but does "
                         r"not answer \(frozen or cut off\)", output(cluster, name)), output(cluster)
    assert took >= float(TIMEOUT), "a worker gave up before --timeout: %.1f s" % took


def test_a_synchronous_chief_whose_aggregation_times_out_names_a_frozen_ps(monkeypatch, capsys):
    """The deterministic half of the frozen-ps run above, whose chief gives up by whichever path
    comes first: its aggregation, timed out on a ps that accepts connections (a bare listening
    socket) but never answers, asks that ps from this task's server and names it."""
    module = load_example("Synchronous-SGD/ssgd.py")
    frozen, hosts = socket.socket(), ["localhost:%d" % port for port in free_ports(3)]
    frozen.bind(("localhost", int(hosts[0].rpartition(":")[2])))
    frozen.listen(16)
    args = module.parse_flags(["--job_name", "worker", "--task_index", "0", "--timeout", "5",
                               "--ps_hosts", hosts[0], "--worker_hosts", ",".join(hosts[1:])])
    server = module.tf.train.Server(module.tf.train.ClusterSpec(args.cluster), job_name="worker",
                                    task_index=0, config=module.session_config(args))

    class TimedOut:
        def run(self, *_):
            raise module.tf.errors.DeadlineExceededError(None, None, "Timed out waiting")

    hook = object.__new__(module.SynchronousTrainingHook)
    hook.args, hook.server, hook.who, hook.stopped = args, server, "worker0", threading.Event()
    hook.global_step = hook.aggregate = "global_step"
    hook.watchdog = types.SimpleNamespace(reached={"ps": {0}, "worker": {0, 1}})

    def exit_now(code):
        raise SystemExit(code)
    monkeypatch.setattr(module.os, "_exit", exit_now)
    try:
        with pytest.raises(SystemExit) as exited:
            hook.aggregate_until_the_last_step(TimedOut())
    finally:
        frozen.close()
    assert exited.value.code == RETRYABLE
    assert re.search(r"\[worker0\] error: the aggregation stopped: lost the parameter server: "
                     r"ps0 \(\S+\) accepts connections but does not answer", capsys.readouterr().err)


@pytest.mark.parametrize("case", ["a file", "under a file", "unwritable"])
def test_a_log_dir_that_cannot_hold_checkpoints_is_refused_before_any_server_starts(
        tmp_path, case):
    a_file = tmp_path / "file"
    a_file.write_text("")
    log_dir = {"a file": str(a_file), "under a file": str(a_file / "sub"),
               "unwritable": "/proc/log_dir"}[case]
    code, text = run_script([sys.executable, example("Hogwild/Hogwild.py"), "--job_name", "worker",
                             "--task_index", "0", "--log_dir", log_dir])
    assert code == 2, text
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "--log_dir" in lines[0] and "error" in lines[0], text


def test_a_log_dir_in_use_by_another_run_is_refused(tmp_path):
    log_dir = str(tmp_path)
    # The first run holds the lock while the second starts; --step_delay keeps it from spending
    # that time (a new process's TensorFlow import) training at full speed on every core.
    first = start("Hogwild/Hogwild.py", ["--train_steps", "100000", "--log_dir", log_dir,
                                         "--step_delay", "0.02"], workers=1)
    try:
        assert first.wait_for_line("worker0", r"step 50 ", RUN_TIMEOUT), output(first)
        code, text = run_script([sys.executable, example("Hogwild/Hogwild.py"), "--job_name",
                                 "worker", "--task_index", "0", "--log_dir", log_dir])
    finally:
        first.stop()
    assert code == 2, text
    assert re.search(r"--log_dir \S+ is in use by another run \(pid %d "
                     % first.task("worker0").process.pid, text), text


def run_to_the_end(script, log_dir, train_steps):
    cluster = start(script, ["--train_steps", str(train_steps), "--checkpoint_every", "100",
                             "--log_dir", log_dir], workers=1)
    finish(cluster)
    assert set(cluster.returncodes().values()) == {0}, output(cluster)
    return cluster


@pytest.mark.tf2
def test_a_damaged_latest_checkpoint_is_skipped_for_the_newest_intact_one(tmp_path):
    log_dir = str(tmp_path)
    run_to_the_end("Distributed-Setup/dist_setup.py", log_dir, 300)
    latest = last_checkpoint_step(log_dir)
    data = [name for name in os.listdir(log_dir)
            if name.startswith("model.ckpt-%d.data" % latest)]
    assert latest == 300 and data, os.listdir(log_dir)
    with open(os.path.join(log_dir, data[0]), "r+b") as damaged:
        damaged.truncate(100)
    resumed = run_to_the_end("Distributed-Setup/dist_setup.py", log_dir, 500)
    chief = output(resumed, "worker0")
    assert re.search(r"checkpoint \S+-300 is damaged", chief), chief
    assert re.search(r"resuming from \S+-200\b", chief), chief
    assert worker_results(resumed)[0]["first_global_step"] == 200


def test_a_run_that_is_already_complete_says_so(tmp_path):
    log_dir = str(tmp_path)
    run_to_the_end("Distributed-Setup/dist_setup.py", log_dir, 200)
    again = run_to_the_end("Distributed-Setup/dist_setup.py", log_dir, 200)
    assert "this run is already complete: global step 200 >= --train_steps 200" in output(
        again, "worker0"), output(again)
    assert worker_results(again)[0]["local_steps"] == 0


def test_a_connection_flood_on_the_ps_port_is_ridden_out():
    """Mid-run, idle connections are opened to ps0's port and held: more than the soft limit of
    1024 file descriptors that every task gets here (a common default; the hard limit is
    higher) plus the port's listen queue (net.core.somaxconn). A TF 1.15 server out of
    descriptors stops serving the connections it has, so every task takes its hard limit at
    start (take_the_hard_descriptor_limit); the workers train on, and every task ends with 0."""
    with open("/proc/sys/net/core/somaxconn") as queue:
        count = 1024 + int(queue.read()) + 500
    limit = "--nofile=1024:%d" % (count + 1024)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = count + 2000  # and the descriptors this test process holds already
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip("the flood needs %d file descriptors here; the hard limit is %d"
                    % (needed, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    cluster = LocalCluster(example("Hogwild/Hogwild.py"), workers=2, echo=False, args=[
        "--train_steps", "3000", "--log_every", "100", "--timeout", TIMEOUT,
        "--step_delay", "0.005"])  # ≥ 7.5 s of training: worker 1 starts late under load
    flood = []
    try:
        for task in cluster.tasks:
            cluster.start_task(task, ["prlimit", limit, "--"] + cluster.command(task))
        assert cluster.wait_for_line("worker1", r"step 100 ", RUN_TIMEOUT), output(cluster)
        host, port = cluster.ps_hosts[0].rsplit(":", 1)
        for _ in range(count):
            flood.append(socket.socket())
            flood[-1].setblocking(False)
            flood[-1].connect_ex((host, int(port)))
        ps = cluster.task("ps0").process
        assert cluster.wait_for(lambda: ps.poll() is not None or len(
            os.listdir("/proc/%d/fd" % ps.pid)) > 1024, 30), "the ps never held the flood"
        finish(cluster)
    finally:
        for connection in flood:
            connection.close()
        cluster.stop()
    assert set(cluster.returncodes().values()) == {0}, output(cluster)
    assert all(r["global_step"] >= 3000 for r in worker_results(cluster))


def test_a_task_out_of_descriptors_does_not_call_a_peer_unreachable():
    """A port probe that fails because this process has no descriptor left (EMFILE) says
    nothing about the peer: unreachable() does not count it (else a ps in a connection flood
    would call its live workers lost)."""
    probe = (
        "import importlib.util, resource, socket, sys\n"
        "spec = importlib.util.spec_from_file_location('hogwild', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "listener = socket.socket(); listener.bind(('127.0.0.1', 0)); listener.listen(8)\n"
        "closed = socket.socket(); closed.bind(('127.0.0.1', 0))\n"
        "cluster = {'worker': ['127.0.0.1:%d' % s.getsockname()[1] for s in (listener, closed)]}\n"
        "before = module.unreachable(cluster, 'worker')\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)); held = []\n"
        "try:\n"
        "    while True: held.append(open('/dev/null'))\n"
        "except OSError: pass\n"
        "print(before, module.unreachable(cluster, 'worker'))\n")
    result = subprocess.run([sys.executable, "-c", probe, example("Hogwild/Hogwild.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=RUN_TIMEOUT)
    assert result.stdout.decode().split("\n")[-2] == "[1] []", result.stderr.decode()[-2000:]


WATCHED = """
import importlib.util, os, subprocess, sys, time, types
spec = importlib.util.spec_from_file_location("hogwild", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
args = types.SimpleNamespace(job_name="worker", task_index=0, timeout=1.0,
                             cluster={"ps": [], "worker": ["127.0.0.1:1"]})
hogs = []
if sys.argv[2] == "starved":  # on one CPU, behind three busy processes of a higher priority
    cpu = max(os.sched_getaffinity(0))
    hog = "import os; os.sched_setaffinity(0, {%d})\\nwhile True: pass" % cpu
    hogs = [subprocess.Popen([sys.executable, "-c", hog], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL) for _ in range(3)]
    os.sched_setaffinity(0, {cpu}); os.nice(10)  # this thread, and the watchdog's after it
watchdog = module.Watchdog(args, None)
started, cpu_before = time.monotonic(), time.thread_time()
if sys.argv[2] == "waits":
    time.sleep(4 * args.timeout)
else:
    while time.monotonic() - started < 4 * args.timeout:
        pass
watchdog.stop()
for hog in hogs:
    hog.kill()
print("survived: %.2f s of CPU in %.2f s" % (time.thread_time() - cpu_before,
                                           time.monotonic() - started))
"""


@pytest.mark.parametrize("how", ["computes", "starved", "waits"])
def test_the_watchdog_counts_waiting_not_computing_or_a_crowded_cpu(how):
    """--timeout bounds how long a worker waits for its peers. A training thread that computes
    (a slow graph build) or is ready to but gets no CPU (a crowded machine: here three busy
    processes of a higher priority on its one CPU) for 4 × --timeout is no sign of a silent peer;
    one that sleeps that long is stopped, with the retryable code, after about --timeout."""
    started = time.monotonic()
    code, text = run_script([sys.executable, "-c", WATCHED, example("Hogwild/Hogwild.py"), how])
    if how == "waits":
        assert code == RETRYABLE and "[worker0] error: no progress for 1 s (--timeout 1): " \
            "not answering: worker0 (127.0.0.1:1)" in text, text
        assert time.monotonic() - started < RUN_TIMEOUT and "survived" not in text
        return
    assert code == 0, text
    cpu, wall = map(float, re.search(r"survived: ([\d.]+) s of CPU in ([\d.]+) s", text).groups())
    assert wall >= 4.0
    if how == "starved":  # it really was: the thread ran for less than half the time
        assert cpu < wall / 2, text


@pytest.mark.tf2
def test_an_error_is_told_by_the_line_that_says_what_went_wrong():
    """TF 2.x opens a session's error with "Graph execution error:" and the failing node's
    stack; what a task prints is the line after them, as TF 1.15's first line."""
    module = load_example("Hogwild/Hogwild.py")
    tf = module.tf
    with tf.Graph().as_default():
        queue = tf.FIFOQueue(1, tf.int32, [[]])
        with tf.Session() as sess:
            sess.run(queue.close())
            with pytest.raises(tf.errors.OutOfRangeError) as raised:
                sess.run(queue.dequeue() + 1)
    assert module.error_line(raised.value).endswith(
        "is closed and has insufficient elements (requested 1, current size 0)"), raised.value


ABORTED = ("AbortedError", "Graph execution error:\n\nDetected at node 'x'\nNode: 'x'\nStep 7 "
           "was aborted")
RESTARTED = ("FailedPreconditionError", "From /job:worker/replica:0/task:1:\nAdditional GRPC "
             "error information:\n{\"created\":\"@1796364283.33\",\"description\":\"Error "
             "received from peer\",\"grpc_message\":\"RecvBuf expects a different device "
             "incarnation: 1 vs. 2. Your worker job that contains the device (\"/job:worker/"
             "replica:0/task:0/device:CPU:0\") was probably restarted.\",\"grpc_status\":9}")


@pytest.mark.parametrize("script, error, said", [
    ("Hogwild/Hogwild.py", ABORTED, "a ps was restarted under this worker's session, which "
     "cannot be re-created here; start this worker again (Step 7 was aborted)"),
    ("Gossip-SGD/Gossip-SGD.py", ABORTED, "a peer worker was restarted or ended under this "
     "worker's session, which cannot be re-created without a ps; start this worker again (Step "
     "7 was aborted)"),
    ("AllReduce-SGD/AllReduce-SGD.py", RESTARTED, "worker0 (%s) was restarted or ended under "
     "this worker's session, which cannot be re-created without a ps; start this worker again "
     "(RecvBuf expects a different device incarnation: 1 vs. 2. Your worker job that contains "
     "the device (\"/job:worker/replica:0/task:0/device:CPU:0\") was probably restarted.)")])
def test_an_aborted_session_names_a_ps_only_where_there_is_one(script, error, said, monkeypatch,
                                                                 capsys):
    """A session that TensorFlow aborts (a remote task lost its state) ends the worker with the
    retryable code, blaming a ps where the cluster has one and a peer worker where it has none
    (a CI run's Gossip worker once blamed "a ps"): the one that TensorFlow's message names as
    restarted (AllReduce-SGD's survivor once ended with a FailedPreconditionError traceback)."""
    module = load_example(script)

    def aborted(*_):
        raise getattr(module.tf.errors, error[0])(None, None, error[1])
    monkeypatch.setattr(module, "train", aborted)
    hosts = ["localhost:%d" % port for port in free_ports(3)]
    flags = ["--job_name", "worker", "--task_index", "1", "--timeout", TIMEOUT,
             "--worker_hosts", ",".join(hosts[1:])]
    if module.uses_parameter_servers():  # a real ps, which hears the worker's "started"
        flags += ["--ps_hosts", hosts[0]]
        spec = module.tf.train.ClusterSpec(module.parse_flags(flags).cluster)
        module.tf.train.Server(spec, job_name="ps", task_index=0)
    assert module.main(flags) == RETRYABLE
    assert capsys.readouterr().err.strip().splitlines()[-1] == "[worker1] error: " + (
        said % hosts[1] if "%s" in said else said)


@pytest.mark.parametrize("script", ["AllReduce-SGD/AllReduce-SGD.py", "Gossip-SGD/Gossip-SGD.py",
                                    "AD-PSGD/AD-PSGD.py"])
def test_a_peer_restarted_without_a_ps_is_named_by_the_survivor(script):
    """Without a ps a restarted worker cannot rejoin its peers' sessions: the survivor ends with
    the retryable code and one error line that names worker1, whether it saw it gone (port
    closed, no answer) or back with a new incarnation (AllReduce-SGD's survivor once ended with
    a FailedPreconditionError traceback, AD-PSGD's named "(=====)")."""
    cluster = start(script, ["--train_steps", "1000000", "--timeout", "10"])
    try:
        assert cluster.wait_for_line("worker0", r"step 100 ", RUN_TIMEOUT), output(cluster)
        kill_and_restart(cluster, "worker1")
        ended = cluster.wait_for(lambda: cluster.task("worker0").returncode is not None, 60)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert ended, output(cluster)
    assert cluster.task("worker0").returncode == RETRYABLE, output(cluster)
    errors = [line for line in cluster.task("worker0").lines if "] error: " in line]
    assert len(errors) == 1, output(cluster)
    assert re.search(r"worker1 \(%s\)" % re.escape(cluster.worker_hosts[1]), errors[0]), errors


def test_a_worker_that_starts_after_the_others_finished_ends_the_run_with_the_ps():
    """worker1 comes up only once worker0 has trained to --train_steps: it finds the run
    complete and trains nothing, and the ps, which waited for it, ends with 0 once it is done."""
    cluster = LocalCluster(example("Hogwild/Hogwild.py"), workers=2, echo=False, args=[
        "--train_steps", "200", "--log_every", "50", "--timeout", "60"])
    try:
        cluster.start(["ps0", "worker0"])
        assert cluster.wait_for(lambda: cluster.task("worker0").returncode is not None,
                                RUN_TIMEOUT), output(cluster)
        assert cluster.task("ps0").returncode is None, output(cluster)  # it waits for worker1
        cluster.start(["worker1"])
        assert cluster.wait(RUN_TIMEOUT, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert set(cluster.returncodes().values()) == {0}, output(cluster)
    late = [r for r in worker_results(cluster) if r["task_index"] == 1]
    assert late and late[0]["local_steps"] == 0 and late[0]["global_step"] >= 200, output(cluster)
    assert "all 2 workers are done" in output(cluster, "ps0"), output(cluster)


def test_the_ps_outlives_a_done_worker_until_its_port_closes():
    """A worker that has said "done" may still read θ while it shuts down, so the ps serves on
    until its port closes (or --timeout passes): here a "worker" that said done and keeps its
    port open holds the ps up; once the port closes, the ps ends with 0 at once."""
    module = load_example("Hogwild/Hogwild.py")
    cluster = LocalCluster(example("Hogwild/Hogwild.py"), workers=1, echo=False, args=[
        "--timeout", "60"])
    worker = socket.socket()
    try:
        worker.bind(("localhost", int(cluster.worker_hosts[0].rpartition(":")[2])))
        worker.listen(16)
        cluster.start(["ps0"])
        tf = module.tf
        with tf.Graph().as_default():
            done = module.status_queues({"ps": cluster.ps_hosts, "worker": cluster.worker_hosts})[
                0].enqueue((0, b"done"))
            with tf.Session("grpc://" + cluster.ps_hosts[0], config=tf.ConfigProto(
                    operation_timeout_in_ms=60000)) as sess:
                sess.run(done)
        assert not cluster.wait_for(lambda: cluster.task("ps0").returncode is not None, 3), \
            output(cluster)
        worker.close()
        closed_at = time.monotonic()
        assert cluster.wait_for(lambda: cluster.task("ps0").returncode is not None, 30), \
            output(cluster)
        assert time.monotonic() - closed_at < 10
    finally:
        worker.close()
        cluster.stop()
    assert cluster.task("ps0").returncode == 0, output(cluster)
    assert "all 1 worker is done" in output(cluster, "ps0"), output(cluster)
