"""The examples as real Slurm jobs: a single-node Slurm (tests/slurm_cluster.py) runs
Cluster-Engines/slurm/train.sbatch with sbatch, one Slurm task per TensorFlow task; and the Slurm
part of the new cluster resolution (Cluster-Engines/cluster_from_flags.py) on its own.

How the tasks get their cluster: train.sbatch starts an example that reads Slurm's environment
itself (once cluster_from_flags is pasted into the appendix) as it is, and any other through
slurm_task.py, which computes the cluster flags with the same code. The job output's first line
says which. The synchronous example takes whichever way its script allows (slurm_task.py until
the paste); a copy of Hogwild.py with the function pasted in reads Slurm itself; the killed-task
test forces slurm_task.py (SLURM_TASK_FLAGS=1), so that both ways stay tested after the paste."""
import os
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from engines_helpers import ENGINES, patched_example, reads_slurm, resolution_functions
from helpers import ROOT, example, results_in
from slurm_cluster import SingleNodeSlurm, SlurmUnavailable, processes_of_job, task_process

JOB_SCRIPT = os.path.join(ENGINES, "slurm", "train.sbatch")
JOB_BOUND = 240  # seconds for one job, however busy the machine: a short run needs ~10 s
FUNCTIONS = resolution_functions()
# One single-node Slurm for the whole module: under pytest-xdist one worker runs all of it.
pytestmark = pytest.mark.xdist_group("slurm")


class Refused(Exception):
    pass


class Parser:
    """What cluster_from_slurm needs of the examples' parser, whose error() prints one line
    (escaping what is not printable) and exits 2."""

    def error(self, message):
        raise Refused(message)


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


def how_the_cluster_came(script):
    return ("the example reads Slurm's environment itself" if reads_slurm(script)
            else "slurm_task.py passes each task its cluster flags")


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

def test_a_synchronous_example_runs_as_a_slurm_job(slurm, tmp_path):
    """sbatch --ntasks=3: task 0 is the ps, tasks 1 and 2 workers 0 and 1; the job COMPLETES,
    each worker prints its RESULT, the ps exits by itself, and no process is left. (Hogwild, the
    asynchronous example, runs in the two tests below.)"""
    record, text = submit_and_wait(slurm, tmp_path, "Synchronous-SGD/ssgd.py",
                                   ["--train_steps", "300"])
    assert how_the_cluster_came(example("Synchronous-SGD/ssgd.py")) in text.splitlines()[0], text
    assert_trained(record, text, workers=2, train_steps=300)


def test_the_example_reads_slurm_itself(slurm, tmp_path):
    """A copy of Hogwild.py with Cluster-Engines/cluster_from_flags.py pasted into its appendix
    gets its cluster from Slurm's variables: here two of four tasks are ps (SLURM_PS_TASKS=2)."""
    script = patched_example("Hogwild/Hogwild.py", str(tmp_path))
    record, text = submit_and_wait(slurm, tmp_path, script, ["--train_steps", "300"], ntasks=4,
                                   env={"SLURM_PS_TASKS": "2"})
    assert "2 of them ps; the example reads Slurm's environment itself" in text, text
    assert_trained(record, text, workers=2, train_steps=300)
    assert "[ps1] all 2 workers are done" in text, text


def test_a_killed_task_ends_the_step_and_the_job_is_requeued(slurm, tmp_path):
    """Worker 1's process is killed mid-run. srun --kill-on-bad-exit ends the whole step; the
    task died of a signal (137, retryable), so train.sbatch requeues the job; the second run's
    chief resumes from --log_dir's newest checkpoint, and the job COMPLETES, restarted once.
    The tasks get their cluster flags from slurm_task.py here (SLURM_TASK_FLAGS=1), whether or
    not Hogwild.py reads Slurm's environment itself, so that both ways stay tested."""
    log_dir = tmp_path / "log"
    output = str(tmp_path / "slurm-%j.out")
    job_id = slurm.submit(
        JOB_SCRIPT, ["Hogwild/Hogwild.py", "--train_steps", "800", "--log_every", "100",
                     "--checkpoint_every", "50", "--step_delay", "0.005",
                     "--log_dir", str(log_dir)],
        cwd=ROOT, options=["--ntasks=3", "--output", output],
        env={"PYTHON": sys.executable, "SLURM_TASK_FLAGS": "1"})
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
    assert "slurm_task.py passes each task its cluster flags" in first, first
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
    assert "--train_steps must be a positive integer" in text, text
    assert "exited with code 2, which no restart can mend" in text, text


# The Slurm part of cluster_from_flags, on its own ---------------------------------------------

HOSTLISTS = ["node01", "node[01-03,7]", "gpu[08-11],cpu[1-2]", "a[1-2]b[08-09]", "x[9-10]",
             "n[001-002,10]", "rack1-n[1,3-4],login"]


def test_hostlist_expansion_is_scontrols(slurm):
    for hostlist in HOSTLISTS:
        expected = slurm.run("scontrol", "show", "hostnames", hostlist).split()
        assert FUNCTIONS["expand_hostlist"](hostlist) == expected, hostlist


def test_tasks_per_node():
    assert FUNCTIONS["expand_tasks_per_node"]("2(x3),1") == [2, 2, 2, 1]
    assert FUNCTIONS["expand_tasks_per_node"]("4") == [4]


def step(rank, node, local, nodelist="node[01-02]", tasks_per_node="2(x2)", **extra):
    environ = {"SLURM_JOB_ID": "1000", "SLURM_PROCID": str(rank), "SLURM_STEP_NODELIST": nodelist,
               "SLURM_STEP_TASKS_PER_NODE": tasks_per_node, "SLURMD_NODENAME": node,
               "SLURM_LOCALID": str(local)}
    environ.update(extra)
    return FUNCTIONS["cluster_from_slurm"](Parser(), environ)


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


def test_a_slurm_jobs_ports_never_fall_in_a_parallel_test_process_range():
    """The real jobs of this module run beside other tests, whose clusters take ports from their
    test process's range (tests/conftest.py): a job's task must never find its port taken by one
    of them (a worker did, exit 2 "port … is already in use", in a CI run whose job 1 got 16418).
    The lowest and highest ports any job can use, from the resolution function itself: job ids
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
    ({"SLURM_STEP_NODELIST": "node[01-02"}, "cannot read"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x3)"}, "do not match"),
    ({"SLURM_STEP_TASKS_PER_NODE": "40,1"}, "more than 32 tasks"),
    ({"SLURM_STEP_NODELIST": ""}, "start every task with srun"),
])
def test_a_step_that_cannot_be_laid_out_is_refused_in_one_line(environ, expected):
    with pytest.raises(Refused) as refusal:
        step(1, "node01", 1, **environ)
    assert expected in str(refusal.value) and "\n" not in str(refusal.value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(
    ["SLURM_PROCID", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURMD_NODENAME",
     "SLURM_LOCALID", "SLURM_PS_TASKS", "SLURM_JOB_ID"]),
    st.one_of(st.sampled_from(["0", "1", "-1", "2(x2)", "n[1-2]", "n1", "n[01-", "x", ""]),
              st.text(max_size=8)), max_size=7))
def test_any_slurm_environment_is_read_or_refused(environ):
    environ = dict({"SLURM_JOB_ID": "7", "SLURM_PROCID": "0"}, **environ)
    try:
        ps_hosts, worker_hosts, job_name, task_index = FUNCTIONS["cluster_from_slurm"](
            Parser(), environ)
    except Refused:
        return
    assert job_name in ("ps", "worker") and ps_hosts and worker_hosts
