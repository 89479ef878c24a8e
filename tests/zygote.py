"""Start the tests' example processes from a pre-loaded interpreter, instead of from scratch.

Importing TensorFlow costs about 2 s of CPU on TF 1.15 and 6 s on TF 2.x, in every process, and
the tests start hundreds of tasks on a 2-core machine. A zygote is one Python process per
interpreter that has imported what every example imports (NumPy, scikit-learn's datasets,
TensorFlow's compat.v1 API) and read the digits once (a copy for each load_digits() without
options), started no thread and no session, and then forks: each child sets
the task's argv, environment, working directory and output, makes its own process group, and
runs the script as `python script.py` would (runpy, __name__ == "__main__", the same exit code,
the same traceback on an uncaught exception). LocalCluster uses it through `spawn`; a command
that is not `<this interpreter> <script.py> ...` is started as a normal process. The tests that
run `bash run.sh`, the launcher or a script's command line (run_script) still start real
processes, so the user's path is tested as it is.

Before it forks, the zygote moves everything it has made out of the garbage collector's sight
(gc.freeze: none of it is garbage): a child's collections then never walk TensorFlow's objects,
and never copy the pages they live on. That took a third of each task's CPU: a 2-step cluster of
three tasks cost 2.4 s of CPU, and 1.6 s with the freeze (TF 1.15).

The zygote imports NumPy with one OpenBLAS thread (OPENBLAS_NUM_THREADS=1): a process with more
than one thread must not fork. Its children die with it, and it dies with the test process.
"""
import array
import gc
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading

HERE = os.path.abspath(__file__)
PRELOADED = "import numpy, sklearn.datasets; import tensorflow.compat.v1"


# --- the zygote's side ---------------------------------------------------------------------

def serve(channel):
    """Fork a child per request until the test process goes away; returns in each child (its
    request), never in the zygote."""
    children = {}  # pid -> the write end of its status pipe
    # poll, not select: the channel keeps the number it has in the test process, which may be
    # above 1023 (a test process that has run servers in-process holds many descriptors), and
    # select() cannot watch those: the zygote died at its first request.
    requests = select.poll()
    requests.register(channel, select.POLLIN)
    while True:
        if requests.poll(50):
            message, fds = receive(channel)
            if message is None:
                os._exit(0)  # the test process closed the channel
            output, status = fds
            pid = os.fork()
            if pid == 0:
                channel.close()
                for fd in children.values():
                    os.close(fd)
                os.close(status)
                return message, output
            os.close(output)
            children[pid] = status
            channel.sendall(struct.pack("!i", pid))
        while children:
            pid, code = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            status = children.pop(pid, None)
            if status is not None:
                returncode = -os.WTERMSIG(code) if os.WIFSIGNALED(code) else os.WEXITSTATUS(code)
                os.write(status, struct.pack("!i", returncode))
                os.close(status)


def receive(channel):
    """One request: a JSON line and two file descriptors (output, status)."""
    fds = array.array("i")
    data, ancillary, _, _ = channel.recvmsg(65536, socket.CMSG_LEN(2 * fds.itemsize))
    if not data:
        return None, None
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    while not data.endswith(b"\n"):
        data += channel.recv(65536)
    return json.loads(data.decode("utf-8")), list(fds)


def become(request, output):
    """In the child: become `python script.py args...` in its own process group."""
    os.setsid()
    set_death_signal()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    os.close(devnull)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(request["env"])
    if request["env"].get("TESTS_STACKS_WHEN_GIVING_UP") == "1":
        print_stacks_when_giving_up()
    os.chdir(request["cwd"])
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    import runpy
    runpy.run_path(script, run_name="__main__")


def print_stacks_when_giving_up():
    """A diagnostic that a test may ask for (TESTS_STACKS_WHEN_GIVING_UP=1): a task that gives
    up, os._exit(138), first prints every thread's stack, so that the test's output shows what
    it was waiting for."""
    import faulthandler
    exit_now = os._exit

    def exit_after_the_stacks(code):
        if code == 138:
            sys.stdout.flush()
            faulthandler.dump_traceback(all_threads=True)
        exit_now(code)
    os._exit = exit_after_the_stacks


def set_death_signal():
    """SIGKILL when the parent dies (Linux's PR_SET_PDEATHSIG), as the launcher's children."""
    import ctypes
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


def read_the_digits_once():
    """scikit-learn's load_digits() parses a compressed CSV file, 0.09 s of CPU in each task with
    TF 1.15's scikit-learn: the zygote parses it once, and its children get a copy of the result."""
    import copy
    import sklearn.datasets
    parse, parsed = sklearn.datasets.load_digits, sklearn.datasets.load_digits()

    def load_digits(**options):
        return parse(**options) if options else copy.deepcopy(parsed)

    sklearn.datasets.load_digits = load_digits


def zygote_main():
    set_death_signal()
    channel = socket.socket(fileno=int(sys.argv[1]))
    exec(PRELOADED)
    read_the_digits_once()
    gc.freeze()
    assert len(os.listdir("/proc/self/task")) == 1, "the zygote must be single-threaded to fork"
    channel.sendall(b"ready\n")
    request, output = serve(channel)
    become(request, output)  # a SystemExit from the script ends this process as Python would


# --- the test process's side -----------------------------------------------------------------

class Zygote:
    """A running zygote for one interpreter."""

    def __init__(self, python):
        self.python = python
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2")
        errors = tempfile.TemporaryFile()
        self.process = subprocess.Popen([python, HERE, str(theirs.fileno())],
                                        pass_fds=[theirs.fileno()], env=env,
                                        stdin=subprocess.DEVNULL, stdout=errors, stderr=errors)
        theirs.close()
        self.channel.settimeout(120)
        if self.channel.recv(6) != b"ready\n":
            errors.seek(0)
            raise RuntimeError("the zygote of %s did not start: %s" % (
                python, errors.read().decode("utf-8", "replace")[-2000:]))
        self.channel.settimeout(None)
        self.lock = threading.Lock()

    def spawn(self, command, env, cwd):
        output_read, output_write = os.pipe()
        status_read, status_write = os.pipe()
        message = json.dumps({"argv": command[1:], "env": env, "cwd": cwd}).encode() + b"\n"
        try:
            with self.lock:
                self.channel.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                  array.array("i", [output_write, status_write]))])
                pid, = struct.unpack("!i", receive_exactly(self.channel, 4))
        finally:
            os.close(output_write)
            os.close(status_write)
        return ForkedProcess(command, pid, output_read, status_read)


def receive_exactly(channel, size):
    data = b""
    while len(data) < size:
        chunk = channel.recv(size - len(data))
        if not chunk:
            raise RuntimeError("the zygote exited")
        data += chunk
    return data


class ForkedProcess:
    """What LocalCluster needs of a subprocess.Popen: pid, stdout, poll, wait, returncode."""

    def __init__(self, args, pid, output, status):
        self.args, self.pid, self.returncode = args, pid, None
        self.stdout = os.fdopen(output, "rb")
        self._status = status
        self._lock = threading.Lock()

    def poll(self):
        return self._collect(0)

    def wait(self, timeout=None):
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return code

    def _collect(self, timeout):
        """The exit status, once the zygote has written it (poll, not select: the test process
        may hold more than 1024 descriptors)."""
        with self._lock:
            if self.returncode is None:
                waiting = select.poll()
                waiting.register(self._status, select.POLLIN)
                if waiting.poll(None if timeout is None else int(timeout * 1000)):
                    data = os.read(self._status, 4)
                    os.close(self._status)
                    self.returncode, = struct.unpack("!i", data)
            return self.returncode

    def __del__(self):
        if self.returncode is None:
            os.close(self._status)


ZYGOTES = {}
ZYGOTES_LOCK = threading.Lock()


def spawn(command, env, cwd, fallback):
    """LocalCluster's spawn: a fork of the zygote for `<sys.executable> <script.py> ...`, the
    normal process (fallback) otherwise."""
    if len(command) < 2 or command[0] != sys.executable or not command[1].endswith(".py"):
        return fallback(command, env, cwd)
    with ZYGOTES_LOCK:
        if command[0] not in ZYGOTES:
            ZYGOTES[command[0]] = Zygote(command[0])
        zygote = ZYGOTES[command[0]]
    return zygote.spawn(command, env, cwd)


if __name__ == "__main__":
    zygote_main()
