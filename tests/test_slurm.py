"""The examples as real Slurm jobs: a single-node Slurm (tests/slurm_cluster.py) runs
Cluster-Engines/slurm/train.sbatch with sbatch, one Slurm task per TensorFlow task, each started
through Cluster-Engines/slurm/slurm_task.py, which turns the step's environment into the cluster
flags (the examples read no Slurm variable); and that wrapper's layout on its own, without Slurm:
host lists, tasks per node, block distribution, SLURM_PS_TASKS, ports, refusals, and host lists
long enough to hang a naive expansion."""
import os
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import ROOT, load_example, results_in
from slurm_cluster import SingleNodeSlurm, SlurmUnavailable, processes_of_job, task_process

WRAPPER = os.path.join(ROOT, "Cluster-Engines", "slurm", "slurm_task.py")
JOB_SCRIPT = os.path.join(ROOT, "Cluster-Engines", "slurm", "train.sbatch")
JOB_BOUND = 240  # seconds for one job, however busy the machine: a short run needs ~10 s
slurm_task = load_example("Cluster-Engines/slurm/slurm_task.py")
# One single-node Slurm for the whole module: under pytest-xdist one worker runs all of it.
pytestmark = pytest.mark.xdist_group("slurm")


@pytest.fixture(scope="module")
def slurm():
    try:
        cluster = SingleNodeSlurm().start()
    except SlurmUnavailable as why:
        pytest.skip(str(why))
    yield cluster
    cluster.stop()


def submit_and_wait(slurm, tmp_path, script, args, ntasks=3, env=None):
    """Submit an example with train.sbatch from the repository root; wait until the job ends.
    Returns (scontrol's record, the job's output)."""
    output = str(tmp_path / "slurm-%j.out")
    job_id = slurm.submit(JOB_SCRIPT, [script] + list(args), cwd=ROOT,
                          options=["--ntasks=%d" % ntasks, "--output", output],
                          env=dict({"PYTHON": sys.executable}, **(env or {})))
    record = slurm.wait(job_id, JOB_BOUND)
    assert_nothing_left(job_id)
    return record, open(output.replace("%j", job_id)).read()


def assert_nothing_left(job_id, bound=15.0):
    """No process of the job outlives it (slurmstepd may take a moment to reap the last)."""
    deadline = time.monotonic() + bound
    while processes_of_job(job_id):
        assert time.monotonic() < deadline, "job %s left processes %s" % (
            job_id, processes_of_job(job_id))
        time.sleep(0.1)


def assert_trained(record, text, workers, train_steps):
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), \
        "job %s: %s %s; its output:\n%s" % (record.get("JobId"), record["JobState"],
                                            record["ExitCode"], text)  # a str: shown whole
    results = sorted((r for r in results_in(text) if r["job"] == "worker"),
                     key=lambda r: r["task_index"])
    assert [r["task_index"] for r in results] == list(range(workers)), text
    assert results[0]["global_step"] >= train_steps and results[0]["test_accuracy"] > 0.8, text
    assert "[ps0] all %d workers are done" % workers in text, text
    assert "[slurm] every task finished" in text, text


# The job ------------------------------------------------------------------------------------

def test_a_synchronous_example_with_two_ps_runs_as_a_slurm_job(slurm, tmp_path):
    """sbatch --ntasks=4 with SLURM_PS_TASKS=2: tasks 0 and 1 are the ps, tasks 2 and 3 workers
    0 and 1, each given its cluster flags by slurm_task.py; the job COMPLETES, each worker prints
    its RESULT, both ps exit by themselves, and no process is left. (Hogwild, the asynchronous
    example, runs in the two tests below.)"""
    record, text = submit_and_wait(slurm, tmp_path, "Synchronous-SGD/ssgd.py",
                                   ["--train_steps", "300"], ntasks=4,
                                   env={"SLURM_PS_TASKS": "2"})
    assert "4 tasks on localhost, 2 of them ps" in text.splitlines()[0], text
    assert_trained(record, text, workers=2, train_steps=300)
    assert "[ps1] all 2 workers are done" in text, text


def test_a_killed_task_ends_the_step_and_the_job_is_requeued(slurm, tmp_path):
    """Worker 1's process is killed mid-run. srun --kill-on-bad-exit ends the whole step; the
    task died of a signal (137, retryable), so train.sbatch requeues the job; the second run's
    chief resumes from --log_dir's newest checkpoint, and the job COMPLETES, restarted once."""
    log_dir = tmp_path / "log"
    output = str(tmp_path / "slurm-%j.out")
    job_id = slurm.submit(
        JOB_SCRIPT, ["Hogwild/Hogwild.py", "--train_steps", "800", "--log_every", "100",
                     "--checkpoint_every", "50", "--step_delay", "0.005",
                     "--log_dir", str(log_dir)],
        cwd=ROOT, options=["--ntasks=3", "--output", output], env={"PYTHON": sys.executable})
    path = output.replace("%j", job_id)
    deadline = time.monotonic() + JOB_BOUND
    while "[worker0] step 100 " not in (open(path).read() if os.path.exists(path) else ""):
        assert time.monotonic() < deadline and slurm.job(job_id)["JobState"] in (
            "PENDING", "RUNNING"), slurm.job(job_id)
        time.sleep(0.1)  # a file that grows sends no event: look again
    victim = task_process(job_id, 2, "Hogwild.py")  # Slurm task 2 is worker 1
    assert victim, "worker 1's process not found"
    os.kill(victim, 9)
    record = slurm.wait(job_id, JOB_BOUND)
    assert_nothing_left(job_id)
    text = open(path).read()
    first, _, second = text.partition("[slurm] job %s (restart 1)" % job_id)
    assert first.startswith("[slurm] job %s (restart 0): 3 tasks on localhost, 1 of them ps"
                            % job_id), first
    assert "task 2 exited with code 137 (retryable): requeueing the job (restart 1 of 3)" in first
    assert "Killed" in first and not results_in(first), first  # the step ended, unfinished
    assert (record["JobState"], record["ExitCode"], record["Restarts"]) == (
        "COMPLETED", "0:0", "1"), (record, text)
    assert "[worker0] resuming from %s" % log_dir in second, second
    results = [r for r in results_in(second) if r["job"] == "worker"]
    assert len(results) == 2 and all(r["first_global_step"] >= 50 for r in results), second


def test_bad_input_fails_the_job_without_a_requeue(slurm, tmp_path):
    """Exit code 2 (bad input) is permanent: the job FAILS with it, and is not requeued."""
    record, text = submit_and_wait(slurm, tmp_path, "Hogwild/Hogwild.py", ["--train_steps", "0"],
                                   ntasks=2)
    assert (record["JobState"], record["ExitCode"], record["Restarts"]) == ("FAILED", "2:0", "0")
    assert "--train_steps must be an integer from 1 to" in text, text
    assert "exited with code 2, which no restart can mend" in text, text


# The wrapper's layout, without Slurm ----------------------------------------------------------

HOSTLISTS = ["node01", "node[01-03,7]", "node[01-03,7],gpu1", "gpu[08-11],cpu[1-2]",
             "a[1-2]b[08-09]", "x[9-10]", "n[001-002,10]", "rack1-n[1,3-4],login"]


def test_hostlist_expansion_is_scontrols(slurm):
    for hostlist in HOSTLISTS:
        expected = slurm.run("scontrol", "show", "hostnames", hostlist).split()
        assert slurm_task.expand_hostlist(hostlist) == expected, hostlist


def test_host_lists_and_tasks_per_node():
    assert slurm_task.expand_hostlist("node[01-03,7],gpu1") == [
        "node01", "node02", "node03", "node7", "gpu1"]
    assert slurm_task.expand_hostlist("a[1-2]b[08-09]") == ["a1b08", "a1b09", "a2b08", "a2b09"]
    assert slurm_task.expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert slurm_task.expand_tasks_per_node("4") == [4]


def step(rank, node, local, nodelist="node[01-02]", tasks_per_node="2(x2)", **extra):
    environ = {"SLURM_JOB_ID": "1000", "SLURM_PROCID": str(rank), "SLURM_STEP_NODELIST": nodelist,
               "SLURM_STEP_TASKS_PER_NODE": tasks_per_node, "SLURMD_NODENAME": node,
               "SLURM_LOCALID": str(local)}
    environ.update(extra)
    return slurm_task.cluster_from_slurm(environ)


def test_a_two_node_step_is_laid_out_by_blocks_with_ports_from_the_job_id():
    base = 16384 + 1000 % 512 * 32  # 31232
    ps = "node01:%d" % base
    workers = "node01:%d,node02:%d,node02:%d" % (base + 1, base, base + 1)
    assert step(0, "node01", 0) == (ps, workers, "ps", 0)
    assert step(1, "node01", 1) == (ps, workers, "worker", 0)
    assert step(3, "node02", 1) == (ps, workers, "worker", 2)
    two_ps = step(2, "node02", 0, SLURM_PS_TASKS="2")
    assert two_ps == ("node01:%d,node01:%d" % (base, base + 1),
                      "node02:%d,node02:%d" % (base, base + 1), "worker", 0)


def test_every_task_of_a_five_node_step_finds_the_same_cluster_and_its_own_place():
    """node[01-03,7],gpu1 with 2(x3),1,1 tasks: 8 tasks, placed node by node in the list's
    order (block distribution), the first two ps (SLURM_PS_TASKS=2); every task computes the
    same cluster, and its own role."""
    nodelist, tasks_per_node = "node[01-03,7],gpu1", "2(x3),1,1"
    base = 16384 + 1000 % 512 * 32
    hosts = ["node01:%d" % base, "node01:%d" % (base + 1), "node02:%d" % base,
             "node02:%d" % (base + 1), "node03:%d" % base, "node03:%d" % (base + 1),
             "node7:%d" % base, "gpu1:%d" % base]
    where = [(host.partition(":")[0], int(host.rpartition(":")[2]) - base) for host in hosts]
    for rank, (node, local) in enumerate(where):
        assert step(rank, node, local, nodelist, tasks_per_node, SLURM_PS_TASKS="2") == (
            ",".join(hosts[:2]), ",".join(hosts[2:]),
            "ps" if rank < 2 else "worker", rank if rank < 2 else rank - 2)
    with pytest.raises(slurm_task.LayoutError, match="block distribution"):
        step(1, "node02", 0, nodelist, tasks_per_node)  # where cyclic distribution puts it


def test_a_slurm_jobs_ports_never_fall_in_a_parallel_test_process_range():
    """The real jobs of this module run beside other tests, whose clusters take ports from their
    test process's range (tests/conftest.py): a job's task must never find its port taken by one
    of them (a worker did, exit 2 "port … is already in use", in a CI run whose job 1 got 16418).
    The lowest and highest ports any job can use, from the wrapper's layout itself: job ids
    0 and 511 (mod 512), one node with 32 tasks."""
    import conftest

    def ports(job_id):
        ps, workers, _, _ = step(0, "node01", 0, nodelist="node01", tasks_per_node="32",
                                 SLURM_JOB_ID=str(job_id))
        return [int(host.rpartition(":")[2]) for host in (ps + "," + workers).split(",")]

    lowest, highest = min(ports(0)), max(ports(511))
    assert (lowest, highest) == conftest.SLURM_JOB_PORTS
    for index in range(conftest.PORT_RANGES):
        low, high = conftest.port_range_of("gw%d" % index)
        assert high < lowest or low > highest, (index, low, high)


@pytest.mark.parametrize("environ, expected", [
    ({"SLURMD_NODENAME": "node02"}, "block distribution"),  # cyclic: task 1 on the 2nd node
    ({"SLURM_PS_TASKS": "4"}, "leaves no worker"),
    ({"SLURM_PS_TASKS": "0"}, "leaves no worker or no ps"),
    ({"SLURM_PS_TASKS": "-1"}, "SLURM_PS_TASKS='-1' must be a whole number"),
    ({"SLURM_STEP_NODELIST": "node[01-02"}, "not a Slurm host list (an unclosed bracket)"),
    ({"SLURM_STEP_NODELIST": "node[02-01]"}, "not a Slurm host list (range '02-01')"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x3)"}, "they do not match"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x2"}, "is not Slurm's tasks per node"),
    ({"SLURM_STEP_TASKS_PER_NODE": "40,1"}, "more than the 32 ports a job has on a node"),
    ({"SLURM_STEP_NODELIST": ""}, "start every task with srun"),
    ({"SLURM_JOB_ID": ""}, "not a task of a Slurm job"),
    ({"SLURM_LOCALID": "x\ny"}, "SLURM_LOCALID='x\\ny' must be a whole number"),
])
def test_a_step_that_cannot_be_laid_out_is_refused_in_one_line(environ, expected):
    with pytest.raises(slurm_task.LayoutError) as refusal:
        step(1, "node01", 1, **environ)
    assert expected in str(refusal.value) and "\n" not in str(refusal.value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(
    ["SLURM_PROCID", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURMD_NODENAME",
     "SLURM_LOCALID", "SLURM_PS_TASKS", "SLURM_JOB_ID"]),
    st.one_of(st.sampled_from(["0", "1", "-1", "2(x2)", "n[1-2]", "n1", "n[01-", "x", "",
                               "n[1-99999999999]", "1(x99999999999)"]),
              st.text(max_size=8)), max_size=7))
def test_any_slurm_environment_is_laid_out_or_refused_in_one_line(environ):
    environ = dict({"SLURM_JOB_ID": "7", "SLURM_PROCID": "0"}, **environ)
    try:
        ps_hosts, worker_hosts, job_name, task_index = slurm_task.cluster_from_slurm(environ)
    except slurm_task.LayoutError as refusal:
        assert "\n" not in str(refusal) and len(str(refusal)) < 400, str(refusal)
        return
    assert job_name in ("ps", "worker") and ps_hosts and worker_hosts


# Long host lists: expanded fast, or refused at once ------------------------------------------

@pytest.mark.parametrize("variable, value", [
    ("SLURM_STEP_NODELIST", "node[1-99999999999]"),          # a hundred billion names
    ("SLURM_STEP_NODELIST", "rack[1-1000]node[1-1000]"),     # a million, from two small ranges
    ("SLURM_STEP_NODELIST", "node[1-65537]"),                # one past Slurm's own bound
    ("SLURM_STEP_TASKS_PER_NODE", "1(x99999999999)"),
])
def test_a_step_too_large_to_lay_out_is_refused_at_once(variable, value):
    """Counted before anything is expanded: refused at once (not after minutes of expanding;
    CPU time, which other processes on the machine do not stretch)."""
    started = time.process_time()
    with pytest.raises(slurm_task.LayoutError) as refusal:
        step(0, "node1", 0, nodelist="node[1-2]", tasks_per_node="2(x2)", **{variable: value})
    assert time.process_time() - started < 0.5
    assert "more than the 65536" in str(refusal.value), str(refusal.value)


def test_a_long_but_sane_host_list_is_laid_out_fast():
    """65,536 nodes (Slurm's own bound on a range), 10,000 names one by one: well under a
    second of CPU each, and the last task finds its place."""
    started = time.process_time()
    ps, workers, job_name, task_index = step(
        65535, "node65536", 0, nodelist="node[00001-65536]", tasks_per_node="1(x65536)")
    assert (job_name, task_index, len(workers.split(","))) == ("worker", 65534, 65535)
    names = ",".join("host%d" % number for number in range(10000))
    assert slurm_task.expand_hostlist(names) == names.split(",")
    assert time.process_time() - started < 3.0  # ~0.2 s here


# The wrapper as srun starts it ----------------------------------------------------------------

STUB = """import os, sys
flags = dict(zip(sys.argv[1::2], sys.argv[2::2]))
print("stub", flags["--job_name"], flags["--task_index"], len(flags["--ps_hosts"].split(",")),
      len(flags["--worker_hosts"].split(",")), flags.get("--train_steps"), os.getpid(),
      "TF_CONFIG" in os.environ)
"""


def wrapped(tmp_path, environ, args=()):
    """Run slurm_task.py as srun would, on a stub example that prints the flags it got.
    Returns (exit code, output, the wrapper's pid)."""
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    process = subprocess.Popen([sys.executable, WRAPPER, str(stub)] + list(args),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=dict(os.environ, **environ))
    text, _ = process.communicate(timeout=60)  # a hang fails here, not after an hour
    return process.returncode, text.decode(), process.pid


def slurm_environ(nodes, rank, node, local, **extra):
    return dict({"SLURM_JOB_ID": "1000", "SLURM_PROCID": str(rank), "SLURMD_NODENAME": node,
                 "SLURM_LOCALID": str(local), "SLURM_STEP_NODELIST": nodes,
                 "SLURM_STEP_TASKS_PER_NODE": "1(x%d)" % len(slurm_task.expand_hostlist(nodes)),
                 "TF_CONFIG": '{"cluster": {}}'}, **extra)


def test_the_wrapper_becomes_the_example_with_its_cluster_flags(tmp_path):
    """Same process (srun signals and counts the example), the step's flags before the
    example's own, and no TF_CONFIG left to contradict them: here the last of 4,000 tasks."""
    code, text, pid = wrapped(tmp_path, slurm_environ("node[0001-4000]", 3999, "node4000", 0),
                              ["--train_steps", "7"])
    assert (code, text.split()) == (0, ["stub", "worker", "3998", "1", "3999", "7", str(pid),
                                        "False"]), text


@pytest.mark.parametrize("environ, args, expected", [
    ({"SLURM_STEP_NODELIST": "node[1-99999999999]"}, [], "names 99999999999 hosts, more than"),
    ({"SLURMD_NODENAME": "elsewhere"}, [], "not where block distribution puts it"),
    ({}, ["--ps_hosts", "a:1"], "--ps_hosts: the step's layout gives every task its cluster"),
    ({}, ["--task_index=1"], "--task_index: the step's layout gives every task its cluster"),
])
def test_the_wrapper_refuses_in_one_line_and_exit_code_2(tmp_path, environ, args, expected):
    code, text, _ = wrapped(tmp_path, dict(slurm_environ("n[1-3]", 0, "n1", 0), **environ), args)
    assert code == 2 and text.startswith("slurm_task: error: ") and expected in text, text
    assert len(text.strip().splitlines()) == 1, text


def test_a_cluster_too_long_for_one_argument_is_refused_in_one_line(tmp_path):
    """20,000 tasks make --worker_hosts over 300,000 characters, more than Linux passes in one
    argument (128 KiB): the exec fails, and the wrapper says so in one line."""
    code, text, _ = wrapped(tmp_path, slurm_environ("node[00001-20000]", 0, "node00001", 0))
    assert code == 2 and len(text.strip().splitlines()) == 1, text
    assert "with the cluster flags of 20000 tasks (Argument list too long)" in text, text


def test_a_missing_example_is_refused(tmp_path):
    done = subprocess.run([sys.executable, WRAPPER, str(tmp_path / "none.py")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    assert done.returncode == 2 and b"none.py is not a file" in done.stdout, done.stdout
