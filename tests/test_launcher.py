"""run.sh and the shared launcher: output, results table, exit codes, clean-up, interpreters."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading

import pytest

import conftest
import launch
from helpers import ROOT, RUN_TIMEOUT, example, results_in, run_script

RUN_SH = example("Distributed-Setup/run.sh")
PYTHON = {"PYTHON": sys.executable}


def launched_pids(text):
    return [int(pid) for pid in re.findall(r"\(pid (\d+)\)", text)]


def network(pid):
    """The network namespace a process runs in."""
    return os.readlink("/proc/%d/ns/net" % pid)


def assert_gone(pids):
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError("process %d is still running" % pid)


@pytest.mark.tf2
def test_run_sh_trains_prints_the_table_and_returns():
    code, text = run_script(["bash", RUN_SH, "--train_steps", "300"], env=PYTHON)
    assert code == 0, text
    assert re.search(r"^\[ps0\] all 1 workers? (is|are) done", text, re.M), text
    assert re.search(r"^\[worker0\] step 250 \(global 250\)", text, re.M)
    assert re.search(r"^worker0\s+300\s+300\s", text, re.M), text
    assert "dist_setup: 1 worker(s)" in text
    assert len(results_in(text)) == 1
    assert_gone(launched_pids(text))


def test_workers_variable_and_arguments_reach_the_script():
    code, text = run_script(["bash", example("Distributed-Setup/run_sup.sh"), "--train_steps",
                             "200"], env=dict(PYTHON, WORKERS="3"))
    assert code == 0, text
    assert sorted(r["task_index"] for r in results_in(text)) == [0, 1, 2]
    assert all(r["algorithm"] == "dist_setup_sup" for r in results_in(text))


MOMENTS = {  # the line after which the signal is sent
    "start-up": "[launch] ",
    "training": "[worker0] step ",
    "shutdown": "[worker0] RESULT ",  # the ps is still up: it waits for its workers to exit
}


@pytest.mark.parametrize("moment", sorted(MOMENTS))
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_ends_every_task(sig, moment):
    steps = "100000000" if moment != "shutdown" else "300"
    process = subprocess.Popen(["bash", RUN_SH, "--train_steps", steps, "--log_every", "100"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=dict(os.environ, **PYTHON), start_new_session=True)
    lines = []
    try:
        for raw in process.stdout:
            lines.append(raw.decode())
            if lines[-1].startswith(MOMENTS[moment]):
                break
        # Running, yet in a network namespace of their own: nothing outside it reaches their
        # servers. (Probing the ports from here would not show that: with other clusters on
        # this machine, one of them may listen on the same port number in ours.)
        assert "in a private network namespace (loopback only)" in lines[0]
        pids = launched_pids(lines[0])
        assert len(pids) == 2 and all(network(pid) != network(os.getpid()) for pid in pids)
        os.kill(process.pid, sig)
        rest, _ = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    text = "".join(lines) + rest.decode()
    assert process.returncode == 130, text
    assert "interrupted: every task was stopped" in text
    assert_gone(launched_pids(text))


def test_launch_network_host_opts_out_of_the_private_namespace():
    code, text = run_script(["bash", RUN_SH, "--train_steps", "100"],
                            env=dict(PYTHON, LAUNCH_NETWORK="host"))
    assert code == 0, text
    assert "on this machine's network" in text


@pytest.mark.parametrize("restart", ["never", "on-failure"])
def test_bad_input_ends_every_task_at_once_and_is_never_restarted(restart):
    code, text = run_script(["bash", RUN_SH, "--train_steps", "-1"],
                            env=dict(PYTHON, RESTART=restart))
    assert code == 2, text  # bad input, as the tasks said: run.sh exits as a script would
    assert "failed (exit code 2); every task was stopped" in text
    assert "restarting" not in text
    assert_gone(launched_pids(text))


class Launched:
    """A run.sh (or launch.py) in its own session, its output collected line by line as it
    comes, so that a test can act the moment a line appears."""

    def __init__(self, args, env=None):
        self.lines, self.ended, self.changed = [], False, threading.Condition()
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True,
                                        env=dict(os.environ, **PYTHON, **(env or {})))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.process.stdout:
            with self.changed:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self.changed.notify_all()
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def wait_for_line(self, pattern, timeout=RUN_TIMEOUT):
        """The first line that matches; fails the test if the output ends without one."""
        regex = re.compile(pattern)
        with self.changed:
            self.changed.wait_for(lambda: self.ended or any(map(regex.search, self.lines)),
                                  timeout)
            matching = [line for line in self.lines if regex.search(line)]
        assert matching, "no line matching %r in:\n%s" % (pattern, self.text)
        return matching[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        """On a failed assertion: end the launcher (its tasks die with it, PR_SET_PDEATHSIG)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def finish(self, timeout=RUN_TIMEOUT):
        """Wait for the end; returns (exit code, all output). Nothing is left behind."""
        self.process.wait(timeout)
        self.reader.join(timeout)
        assert_gone(launched_pids(self.text))
        return self.process.returncode, self.text

    @property
    def text(self):
        with self.changed:
            return "\n".join(self.lines)

    def pid(self, name):
        """The pid of the task's latest incarnation, from the launcher's own lines."""
        return int(re.findall(r"%s(?: at \S+| restarted) \(pid (\d+)\)" % name, self.text)[-1])


def proc(pid, what):
    with open("/proc/%d/%s" % (pid, what), "rb") as source:
        return source.read()


HOGWILD = example("Hogwild/run.sh")
KILL_AT = r"^\[worker1\] step 50 "  # worker1's first progress line: training is under way


def test_restart_on_failure_starts_a_killed_task_again_with_the_same_command_line():
    """worker1 SIGKILLed early: RESTART=on-failure starts it again at once, with the same
    command line and environment; it rejoins and training completes with both RESULTs."""
    with Launched(["bash", HOGWILD, "--train_steps", "4000", "--log_every", "50"],
                  env={"RESTART": "on-failure"}) as run:
        run.wait_for_line(KILL_AT)
        first = run.pid("worker1")
        command, environment = proc(first, "cmdline"), proc(first, "environ")
        os.kill(first, signal.SIGKILL)
        run.wait_for_line(r"^\[launch\] worker1 restarted \(pid \d+\)")
        again = run.pid("worker1")
        assert again != first
        assert (proc(again, "cmdline"), proc(again, "environ")) == (command, environment)
        code, text = run.finish()
    assert code == 0, text
    assert ("[launch] worker1 died (signal 9); restarting it with the same command line "
            "(restart 1 of 3)") in text
    assert re.search(r"^worker1\s+400\d\s", text, re.M), text  # the last incarnation's RESULT
    assert "[launch] restarted: worker1 1 time(s)" in text


@pytest.mark.parametrize("policy", [{}, {"RESTART": "on-failure", "MAX_RESTARTS": "0"}],
                         ids=["no-policy", "no-restarts-left"])
def test_a_dead_task_is_reported_and_the_others_finish(policy):
    """Without a restart (no policy, or none left), the launcher reports the dead worker and
    lets the others end by themselves: the survivor finishes training, the ps says who is
    missing once it has waited --timeout for it, and the table and the exit code say what
    failed."""
    # --timeout 15: the ps gives a worker whose port closed that long to be started again
    # before it calls it lost (60 s by default). --step_delay 0.01 holds each worker to 100
    # steps/s, so that worker 0 alone cannot end the run before worker 1, started late on a
    # busy machine, has logged its first steps (seen at load 11: worker 1 joined at global
    # step 634 of 1200, at 300 steps/s, and ended at its 46th step).
    with Launched(["bash", HOGWILD, "--train_steps", "1200", "--log_every", "50",
                   "--timeout", "15", "--step_delay", "0.01"], env=policy) as run:
        run.wait_for_line(KILL_AT)
        os.kill(run.pid("worker1"), signal.SIGKILL)
        code, text = run.finish()
    assert code == 1, text
    why = ("RESTART=on-failure would" if not policy
           else "restarted 0 time(s) already; MAX_RESTARTS=0")
    assert "[launch] worker1 died (signal 9); not restarting it (%s" % why in text, text
    assert re.search(r"^worker0\s+120\d\s", text, re.M), text
    assert re.search(r"^worker1  died \(signal 9\)$", text, re.M), text
    assert re.search(r"^    ps0  exit code 1$", text, re.M), text
    assert ("[launch] error: 2 of 3 tasks did not succeed: ps0 exit code 1, worker1 died "
            "(signal 9)") in text


def test_grace_bounds_the_wait_for_the_others_after_a_failure():
    """Hogwild's worker0 trains on without worker1, for 10⁸ steps: --grace (here 1 s) ends it
    and the ps, saying so."""
    with Launched([sys.executable, os.path.join(ROOT, "tools", "launch.py"), "--grace", "1",
                   example("Hogwild/Hogwild.py"), "--train_steps", "100000000",
                   "--log_every", "50"]) as run:
        run.wait_for_line(KILL_AT)
        os.kill(run.pid("worker1"), signal.SIGKILL)
        code, text = run.finish()
    assert code == 1, text
    assert ("[launch] error: ps0, worker0 still running 1 s after worker1 failed (--grace); "
            "every task was stopped") in text
    assert re.search(r"^worker0  stopped by the launcher$", text, re.M), text


@pytest.mark.parametrize("variable, value, message", [
    ("RESTART", "always", "launch: error: unknown RESTART 'always': use on-failure, or never"),
    ("MAX_RESTARTS", "-1", "launch: error: MAX_RESTARTS must be a whole number, 0 or more"),
    ("WORKERS", "two", "launch: error: argument --workers: invalid int value: 'two'"),
    ("LAUNCH_PORTS", "30000", "launch: error: LAUNCH_PORTS must be LOW-HIGH with 1024 <= LOW"),
], ids=["RESTART", "MAX_RESTARTS", "WORKERS", "LAUNCH_PORTS"])
def test_a_bad_launcher_variable_is_one_line_and_exit_code_2(variable, value, message):
    code, text = run_script(["bash", RUN_SH], env=dict(PYTHON, **{variable: value}))
    assert code == 2 and text.startswith(message) and text.count("\n") == 1, text


def test_help_is_the_scripts_own_once_then_the_launchers_variables():
    code, text = run_script(["bash", HOGWILD, "--help"], env=PYTHON)
    assert code == 0, text
    assert text.startswith("usage: Hogwild.py") and text.count("usage:") == 1, text
    assert "--train_steps" in text and "[ps0]" not in text and "(pid" not in text
    variables = text[text.index("run.sh (tools/launch) itself reads"):]
    for variable in ("WORKERS=N", "RESTART=on-failure", "MAX_RESTARTS=N", "PYTHON=",
                     "LAUNCH_NETWORK=host", "LAUNCH_PORTS=LOW-HIGH"):
        assert variable in variables, text


def test_a_reader_that_goes_away_ends_every_task_quietly():
    """`bash run.sh | head -2`: once the pipe is closed the launcher ends every task and exits
    141 (as a shell reports a writer killed by SIGPIPE), with no traceback."""
    process = subprocess.Popen(["bash", HOGWILD, "--train_steps", "100000000", "--log_every",
                                "50"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=dict(os.environ, **PYTHON), start_new_session=True)
    try:
        head = [process.stdout.readline().decode() for _ in range(2)]
        process.stdout.close()  # what head does after its second line
        process.wait(20)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    errors = process.stderr.read().decode()
    assert process.returncode == 141 and errors == "", (process.returncode, errors, head)
    assert_gone(launched_pids(head[0]))


def test_help_into_a_closed_pipe_is_quiet():
    """`bash run.sh --help | less`, quit at once."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    process = subprocess.run(["bash", HOGWILD, "--help"], stdout=write_end,
                             stderr=subprocess.PIPE, env=dict(os.environ, **PYTHON), timeout=60)
    os.close(write_end)
    assert process.returncode == 141 and process.stderr == b"", process


def test_zero_workers_is_refused():
    code, text = run_script(["bash", RUN_SH], env=dict(PYTHON, WORKERS="0"))
    assert code == 2 and "at least 1" in text, text


def copy_of_the_launcher(tmp_path):
    for folder in ("tools", "Distributed-Setup"):
        shutil.copytree(os.path.join(ROOT, folder), str(tmp_path / folder),
                        ignore=shutil.ignore_patterns("__pycache__"))
    return str(tmp_path / "Distributed-Setup" / "run.sh")


def test_without_the_projects_environment_it_says_how_to_get_one(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "PYTHON"}
    process = subprocess.run(["bash", copy_of_the_launcher(tmp_path)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    assert process.returncode == 2
    assert "run 'bash setup.sh'" in process.stdout.decode()


@pytest.mark.parametrize("environment", [".venv", ".venv-tf2"])  # bash setup.sh [--tf2]
def test_it_finds_the_projects_environment_from_a_new_shell(tmp_path, environment):
    run_sh = copy_of_the_launcher(tmp_path)
    os.makedirs(str(tmp_path / environment / "bin"))
    python = tmp_path / environment / "bin" / "python"
    python.write_text('#!/bin/sh\nexec "%s" "$@"\n' % sys.executable)
    python.chmod(0o755)
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/bin:/bin"
    process = subprocess.run(["bash", run_sh, "--train_steps", "100"], env=env, cwd="/",
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             timeout=RUN_TIMEOUT)
    assert process.returncode == 0, process.stdout.decode()
    assert results_in(process.stdout.decode())[0]["global_step"] == 100


def test_on_a_terminal_the_table_stands_without_the_raw_result_lines():
    """A person at a terminal reads the table; programs (a pipe, the tests) get the RESULT
    lines as well."""
    import pty
    main, terminal = pty.openpty()
    process = subprocess.Popen(["bash", RUN_SH, "--train_steps", "100"], stdin=subprocess.DEVNULL,
                               stdout=terminal, stderr=terminal, start_new_session=True,
                               env=dict(os.environ, **PYTHON))
    os.close(terminal)
    shown = b""
    try:
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        code = process.wait(RUN_TIMEOUT)
    finally:
        os.close(main)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    text = shown.decode("utf-8", "replace")
    assert code == 0, text
    assert "RESULT" not in text, text
    assert re.search(r"worker0 +100 ", text) and "steps/s together" in text, text
    _, piped = run_script(["bash", RUN_SH, "--train_steps", "100"], env=PYTHON)
    assert [r["global_step"] for r in results_in(piped)] == [100], piped


def test_free_ports_are_below_the_ephemeral_range_and_never_handed_out_twice():
    """An outgoing connection takes its local port from the ephemeral range, so a port from
    there could be taken between free_ports and the task's bind; and one process must not give
    two clusters the same port (the parallel test run failed on that: 'port … already in use')."""
    first_ephemeral = launch.first_ephemeral_port()
    handed = [port for _ in range(200) for port in launch.free_ports(3)]
    assert len(set(handed)) == len(handed) == 600
    assert all(1024 <= port < first_ephemeral for port in handed), handed


def test_free_ports_stay_in_launch_ports_and_pass_over_a_port_in_use(monkeypatch):
    low = launch.free_ports(1)[0]
    monkeypatch.setenv("LAUNCH_PORTS", "%d-%d" % (low, low + 4))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", low + 2))
        holder.listen(1)
        for _ in range(3):  # wherever the search starts and however often it goes round
            assert sorted(launch.free_ports(4)) == [low, low + 1, low + 3, low + 4]
        with pytest.raises(RuntimeError, match="fewer than 5 free ports"):
            launch.free_ports(5)


def test_parallel_test_processes_have_disjoint_port_ranges_below_the_ephemeral_range():
    first_ephemeral = launch.first_ephemeral_port()
    ranges = [conftest.port_range_of("gw%d" % index) for index in range(conftest.PORT_RANGES)]
    ports = [port for low, high in ranges for port in range(low, high + 1)]
    assert len(set(ports)) == len(ports) and max(ports) < first_ephemeral, ranges
    assert conftest.port_range_of("master") is None and conftest.port_range_of("gw99") is None
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # this very run: its launchers and clusters use its own range
        assert os.environ["LAUNCH_PORTS"] == "%d-%d" % conftest.port_range_of(worker)
