"""setup.sh's own lifecycle, with stand-ins for pip and pytest (the real installs take minutes):
`bash setup.sh test` installs .venv-tf2 beside .venv's install, and ends it with itself."""
import os
import shutil
import signal
import subprocess

import pytest

from helpers import ROOT, wait_until

# A stand-in for a venv's python, run as `python -m <module> ...`: it writes its pid to
# <venv>-<module>.pid, then does what the module would, slowly. .venv's pip returns once
# .venv-tf2's has started (it fails after 30 s without); .venv-tf2's pip runs until it is ended;
# .venv's pytest runs until Ctrl-C, then exits 2 as pytest does, or until SIGTERM, then exits 1
# as pytest does when a test failed.
STAND_IN = """#!/bin/bash
name="$(basename "$(dirname "$(dirname "$0")")")-$2"
case "$name" in
    .venv-pip) for _ in $(seq 300); do [ -f "{root}/.venv-tf2-pip.pid" ] && exit 0; sleep 0.1; done
               exit 1 ;;
    .venv-pytest) exec python3 -c "import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # (as if a test failed)
open('{root}/$name.pid', 'w').write(str(os.getpid()))  # (both handlers are set by now)
try: time.sleep(600)
except KeyboardInterrupt: sys.exit(2)" ;;
    *) echo $$ > "{root}/$name.pid"
       exec sleep 600 ;;
esac
"""


def stand_in_venv(root, venv):
    os.makedirs(os.path.join(root, venv, "bin"))
    python = os.path.join(root, venv, "bin", "python")
    with open(python, "w") as file:
        file.write(STAND_IN.format(root=root))
    os.chmod(python, 0o755)


def pid_in(pid_file):
    with open(pid_file) as file:
        return int(file.read())


def running(pid_file):
    """Whether the process whose pid the stand-in wrote is alive (not gone, not a zombie)."""
    try:
        with open("/proc/%d/stat" % pid_in(pid_file)) as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("ending", ["Ctrl-C", "a test failed"])
def test_the_tf2_environment_installs_beside_the_first_and_ends_with_setup_sh(ending, tmp_path):
    root = str(tmp_path)
    shutil.copy(os.path.join(ROOT, "setup.sh"), root)
    shutil.copytree(os.path.join(ROOT, "requirements"), os.path.join(root, "requirements"))
    for venv in (".venv", ".venv-tf2"):
        stand_in_venv(root, venv)
    setup = subprocess.Popen(["bash", "setup.sh", "test"], cwd=root, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pid_files = [os.path.join(root, name) for name in (".venv-tf2-pip.pid", ".venv-pytest.pid")]
    try:
        # .venv's pip returned only because .venv-tf2's had started: the installs overlap.
        assert wait_until(lambda: all(map(os.path.exists, pid_files)), 60), \
            setup.stdout.read1().decode() if setup.poll() is not None else "still waiting"
        assert all(map(running, pid_files))
        if ending == "Ctrl-C":
            os.killpg(setup.pid, signal.SIGINT)  # as a terminal sends it
        else:
            os.kill(pid_in(pid_files[1]), signal.SIGTERM)
        # It ends now, with pytest's exit code, and ends the install (which runs in a process
        # group of its own: Ctrl-C does not reach it).
        assert setup.wait(30) == (2 if ending == "Ctrl-C" else 1)
        assert wait_until(lambda: not any(map(running, pid_files)), 10)
    finally:
        setup.kill()
        setup.wait()
        for pid_file in filter(os.path.exists, pid_files):  # what a failed check left running
            if running(pid_file):
                os.kill(pid_in(pid_file), signal.SIGKILL)
