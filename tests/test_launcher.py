"""run.sh and the shared launcher: output, results table, exit codes, clean-up, interpreters."""
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from helpers import ROOT, RUN_TIMEOUT, example, listening, results_in, run_script

RUN_SH = example("Distributed-Setup/run.sh")
PYTHON = {"PYTHON": sys.executable}


def launched_pids(text):
    return [int(pid) for pid in re.findall(r"\(pid (\d+)\)", text)]


def launched_ports(text):
    return [int(port) for port in re.findall(r" at localhost:(\d+) \(pid", text)]


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
    assert "[ps0] all 1 workers are done" in text
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
        # Running, yet nothing outside the launcher's network namespace reaches its servers.
        assert "in a private network namespace (loopback only)" in lines[0]
        ports = launched_ports(lines[0])
        assert len(ports) == 2 and not any(listening("127.0.0.1:%d" % port) for port in ports)
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


def test_a_failing_task_ends_the_others_and_the_exit_code_says_so():
    code, text = run_script(["bash", RUN_SH, "--train_steps", "-1"], env=PYTHON)
    assert code == 1, text
    assert "failed (exit code 2); every task was stopped" in text
    assert_gone(launched_pids(text))


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


def test_it_finds_the_projects_environment_from_a_new_shell(tmp_path):
    run_sh = copy_of_the_launcher(tmp_path)
    os.makedirs(str(tmp_path / ".venv" / "bin"))
    python = tmp_path / ".venv" / "bin" / "python"
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
