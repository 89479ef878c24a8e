"""Jupyter, which bash setup.sh installs to open the notebooks (requirements/jupyter.txt): the
pinned Notebook is the one installed, and each `jupyter notebook` command that the READMEs
give, run as written from the repository's root, starts a server that serves Basics-Tutorial's
notebooks (made headless, bounded in time, then stopped by its PID)."""
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from packaging.requirements import Requirement

from helpers import ROOT, free_ports

JUPYTER = os.path.join(os.path.dirname(sys.executable), "jupyter")  # beside this interpreter
READMES = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "Basics-Tutorial", "README.md")]
COMMAND = re.compile(r"jupyter notebook([^\n`#]*)")  # its arguments, up to a comment
START_BOUND = 60  # seconds for the server to say where it listens, however busy the machine
pytestmark = pytest.mark.tf2


def pinned_notebook():
    """The Notebook version that requirements/jupyter.txt pins for this Python."""
    for line in open(os.path.join(ROOT, "requirements", "jupyter.txt")):
        text = line.split("#")[0].strip()
        if text:
            requirement = Requirement(text)
            if requirement.name == "notebook" and (requirement.marker is None or
                                                   requirement.marker.evaluate()):
                return str(requirement.specifier).lstrip("=")
    raise AssertionError("requirements/jupyter.txt pins no notebook for this Python")


def test_the_pinned_jupyter_notebook_is_installed():
    import notebook
    assert notebook.__version__ == pinned_notebook()
    assert os.access(JUPYTER, os.X_OK), JUPYTER


def readme_commands():
    """The arguments of every `jupyter notebook` command in the READMEs, each once."""
    found = []
    for readme in READMES:
        for arguments in COMMAND.findall(open(readme).read()):
            if arguments.split() not in found:
                found.append(arguments.split())
    return found


def test_the_readmes_say_how_to_open_the_notebooks():
    assert readme_commands(), "no README gives a `jupyter notebook` command"


@pytest.mark.parametrize("arguments", readme_commands(), ids=" ".join)
def test_the_readmes_command_serves_the_notebooks(arguments, tmp_path):
    (port,) = free_ports(1)
    # A server of its own: settings, runtime files and the token apart from the user's.
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTER_DATA_DIR=str(tmp_path / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTER_TOKEN="tests")
    headless = ["--no-browser", "--port=%d" % port, "--port-retries=0"]
    if os.geteuid() == 0:  # CI runs as root, which Jupyter refuses without this
        headless.append("--allow-root")
    server = subprocess.Popen([JUPYTER, "notebook"] + arguments + headless, cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_line(server, ":%d/" % port, START_BOUND)  # where it listens, said last
        listing = get(port, "/api/contents/Basics-Tutorial", server)
        names = {item["name"] for item in listing["content"]}
        assert {"Servers.ipynb", "Training-Loop.ipynb", "Multiple-Workers"} <= names, names
        notebook = get(port, "/api/contents/Basics-Tutorial/Servers.ipynb")
        assert notebook["type"] == "notebook" and notebook["content"]["cells"]
    finally:
        server.send_signal(signal.SIGTERM)  # Jupyter's clean shutdown
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert server.returncode in (0, -signal.SIGTERM), server.returncode


def wait_for_line(process, text, bound):
    """The process's output up to the first line holding `text`; fails after `bound` s or if
    the process ends first."""
    output, deadline = b"", time.monotonic() + bound
    while text.encode() not in output:
        remaining = deadline - time.monotonic()
        assert remaining > 0, "no %r within %d s: %s" % (text, bound, output.decode()[-3000:])
        ready, _, _ = select.select([process.stdout], [], [], remaining)
        chunk = os.read(process.stdout.fileno(), 65536) if ready else b""
        assert chunk or not ready, "the server ended (%s): %s" % (process.wait(),
                                                                  output.decode()[-3000:])
        output += chunk
    return output.decode()


def get(port, path, server=None):
    """The server's JSON answer. Jupyter Server 2 says where it listens a moment before it
    accepts connections, so with `server` a refused connection is tried again (nothing signals
    the moment: look again every 0.1 s) while that process lives, for up to START_BOUND s."""
    request = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                     headers={"Authorization": "token tests"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    deadline = time.monotonic() + START_BOUND
    while True:
        try:
            with opener.open(request, timeout=30) as response:
                return json.load(response)
        except urllib.error.URLError as error:
            refused = isinstance(error.reason, ConnectionRefusedError)
            if not (server and refused and server.poll() is None and
                    time.monotonic() < deadline):
                raise
        time.sleep(0.1)
