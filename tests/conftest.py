import collections
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

# Disjoint port ranges for up to 10 parallel test processes: 4000-15999, below both the kernel's
# ephemeral range and the ports 16384-32767 that a Slurm job's tasks take (tests/test_slurm.py
# runs real jobs beside the other tests; see Cluster-Engines/slurm/slurm_task.py).
FIRST_TEST_PORT, PORTS_PER_PROCESS, PORT_RANGES = 4000, 1200, 10
SLURM_JOB_PORTS = (16384, 32767)


def port_range_of(worker):
    """(low, high) of the ports of pytest-xdist's test process "gw<N>", or None."""
    if worker.startswith("gw") and worker[2:].isdigit() and int(worker[2:]) < PORT_RANGES:
        low = FIRST_TEST_PORT + int(worker[2:]) * PORTS_PER_PROCESS
        return low, low + PORTS_PER_PROCESS - 1
    return None


def pytest_configure(config):
    # `bash setup.sh test` runs every test on TensorFlow 1.15.5, then the tests marked tf2 on
    # TensorFlow 2.x (pytest -m tf2): every example trains to its accuracy, every update rule is
    # exact, placement, the notebooks, and the fault matrix for one example of each family.
    config.addinivalue_line("markers", "tf2: part of the TensorFlow 2.x compatibility run")
    # Under pytest-xdist, each test process hands out ports from a range of its own (and every
    # launcher it starts inherits the range), so that two clusters started at once in different
    # processes never get the same port: see launch.free_ports.
    ports = port_range_of(os.environ.get("PYTEST_XDIST_WORKER", ""))
    if ports:
        os.environ["LAUNCH_PORTS"] = "%d-%d" % ports
    # Every LocalCluster task forks from an interpreter that has imported TensorFlow already
    # (tests/zygote.py), unless TESTS_WITHOUT_ZYGOTE=1: then each is a process from scratch.
    if os.environ.get("TESTS_WITHOUT_ZYGOTE") != "1":
        import zygote
        from launch import LocalCluster, start_process
        LocalCluster.spawn = staticmethod(
            lambda command, env, cwd: zygote.spawn(command, env, cwd, fallback=start_process))


# pytest-xdist hands out groups first (Slurm's, the comparison's, the notebooks'), then the
# other tests in the order collected, to whichever process is nearly idle. Those that took 30 s
# or more in CI runs (--durations) are collected first, so that the run does not end with one
# process still busy with a minute-long test that it was handed last while the others idle.
# The cells of one parametrized test are spread evenly over the rest of the run: side by side,
# the 42 killed-worker cells, which mostly wait for a --timeout, left a quarter of the CPU idle
# for two minutes; spread, they wait beside tests that compute.
LONGEST = ("test_reliability.py::test_each_role_killed_and_restarted_in_turn",
           "test_multi_host.py", "test_launcher.py", "test_adpsgd.py::test_every_step_averages",
           "test_adpsgd.py::test_concurrent_averagings", "test_lifecycle.py::test_a_restarted_chief",
           "test_lifecycle.py::test_a_task_out_of_descriptors",
           "test_lifecycle.py::test_the_ps_blames_the_frozen_worker", "test_soak.py",
           "test_synchronous.py::test_with_a_backup_worker_the_others_finish",
           "test_synchronous.py::test_a_dead_chief", "test_sync_switch.py::test_a_ps_restarted",
           "test_sync_switch.py::test_a_worker_killed_after",
           "test_async_svrg.py::test_a_killed_worker_delays")


# TESTS_CPU_LOG=FILE: each test's CPU seconds (its own process, the processes it waited for,
# and the zygotes' children) and wall seconds, one line per test, for finding what makes the
# suite slow on CI's 2 cores. (Linux /proc; a process a test left running is not counted.)
CPU_LOG = os.environ.get("TESTS_CPU_LOG")


def cpu_seconds(pid):
    try:
        with open("/proc/%d/stat" % pid) as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return sum(map(int, fields[11:15])) / os.sysconf("SC_CLK_TCK")  # utime .. cstime


def cpu_of_the_tests_processes():
    import zygote
    return cpu_seconds(os.getpid()) + sum(cpu_seconds(each.process.pid)
                                          for each in zygote.ZYGOTES.values())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item):
    if not CPU_LOG:
        yield
        return
    import time
    cpu, wall = cpu_of_the_tests_processes(), time.time()
    yield
    with open(CPU_LOG, "a") as log:
        log.write("%.1f %.1f %s\n" % (cpu_of_the_tests_processes() - cpu, time.time() - wall,
                                      item.nodeid))


def pytest_collection_modifyitems(items):
    cells = collections.defaultdict(list)  # each test function's cells, by where collected
    for index, item in enumerate(items):
        cells[item.nodeid.partition("[")[0]].append(index)
    position = {}
    for indices in cells.values():
        for k, index in enumerate(indices):  # the k-th of n cells at k/n of the run, shifted
            position[index] = (k + indices[0] / len(items)) / len(indices)  # by the first's
    order = sorted(range(len(items)), key=lambda index: (
        not any(name in items[index].nodeid for name in LONGEST), position[index]))
    items[:] = [items[index] for index in order]


def pytest_sessionfinish(session):
    """Under pytest-xdist (setup.sh runs the suite with -n) each worker process hands its cells
    of the fault matrix to the controlling process, which prints the table."""
    if hasattr(session.config, "workeroutput"):
        from test_reliability import OUTCOMES
        session.config.workeroutput["outcomes"] = [
            [scenario, example, outcome] for (scenario, example), outcome in OUTCOMES.items()]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    from test_reliability import OUTCOMES
    for scenario, example, outcome in getattr(node, "workeroutput", {}).get("outcomes", []):
        OUTCOMES[(scenario, example)] = outcome


def pytest_terminal_summary(terminalreporter):
    """The reliability suite's table: scenario × example → outcome."""
    from test_reliability import OUTCOMES
    if not OUTCOMES:
        return
    scenarios = sorted({scenario for scenario, _ in OUTCOMES})
    examples = sorted({example for _, example in OUTCOMES})
    width = max(len(example) for example in examples)
    write = terminalreporter.write_line
    write("")
    write("fault matrix (survived: training finished without the dead task; failed cleanly: "
          "every task ended, naming it)")
    write("  ".join(["example".ljust(width)] + [s.ljust(18) for s in scenarios]))
    for example in examples:
        write("  ".join([example.ljust(width)] + [
            OUTCOMES.get((scenario, example), "-").ljust(18) for scenario in scenarios]))


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs, unmounted at the end (root only)."""
    import os
    import subprocess
    path = tmp_path / "disk"
    path.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs",
                                            str(path)]).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)])
