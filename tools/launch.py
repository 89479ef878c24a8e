"""Run one example as a local cluster: parameter servers and workers on free localhost ports.

Every example's run.sh calls this (through tools/launch). It starts the tasks, shows their output
with [ps0]/[worker1] prefixes, waits for all of them, prints the results table from their RESULT
lines (on a terminal only the table: the raw RESULT lines are for programs, and show when the
output goes to a pipe or a file), and exits 0 only if every task did (2 where a task refused its
command line, as the examples do; 1 for any other failure). Each task runs in its own
process group, ended by group id, never by name; on Ctrl-C, SIGTERM or a closed output pipe
(`| head`) every task is ended.

A task that fails is reported, and the others may finish without it (asynchronous training
does); --grace bounds how long they get. With --restart on-failure (RESTART=on-failure bash run.sh)
it is started again with the same command line and environment, at most --max_restarts times, as
Kubernetes' restartPolicy OnFailure would. Exit code 2 (bad input) is never retried: every task
is ended at once.

    python tools/launch.py [--workers N] [--ps N] [--restart on-failure] EXAMPLE.py [flags...]

--ps defaults to 1, or to 0 for a script that declares PARAMETER_SERVERS = 0 (workers only,
as in an all-reduce); with --ps 0 no ps is started and the scripts get --ps_hosts ''.

The tests and the benchmark use the same LocalCluster class.
"""
import argparse
import ctypes
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

RESULT_PATTERN = re.compile(r"^\[(\w+)\] RESULT (\{.*\})\s*$")
BAD_INPUT = 2  # the examples' exit code for a wrong command line: retrying cannot help
CLOSED_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a writer whose reader went away
RESTART_POLICIES = ("never", "on-failure")
WITHOUT_PARAMETER_SERVERS = re.compile(r"^PARAMETER_SERVERS = 0\b", re.MULTILINE)


def default_parameter_servers(script):
    """1, or 0 for a script that declares that it has no ps (PARAMETER_SERVERS = 0)."""
    try:
        with open(script) as source:
            return 0 if WITHOUT_PARAMETER_SERVERS.search(source.read()) else 1
    except OSError:
        return 1  # no such script: starting it says so


def free_ports(count):
    """count different ports that nobody uses now, for a cluster's tasks to bind a moment later.

    They come from below the kernel's ephemeral range: a port from inside it (what binding port 0
    gives) can be taken, between this check and the task's bind, as the local end of any outgoing
    connection, such as another cluster's gRPC client. LAUNCH_PORTS=LOW-HIGH narrows the range
    (the tests give each of their parallel processes its own); the search starts at a random
    place in it, so that two launchers started at once rarely look at the same ports, and one
    process never hands out the same port twice until it has gone round the range. A port is
    free when it can be bound on every interface without SO_REUSEADDR, so one that still has
    connections in TIME_WAIT is passed over."""
    low, high = port_range()
    global _NEXT_PORT
    if _NEXT_PORT is None or not low <= _NEXT_PORT <= high:
        _NEXT_PORT = random.randint(low, high)
    ports = []
    for _ in range(high - low + 1):
        port, _NEXT_PORT = _NEXT_PORT, low + (_NEXT_PORT + 1 - low) % (high - low + 1)
        with socket.socket() as probe:
            try:
                probe.bind(("", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise RuntimeError("fewer than %d free ports in %d-%d (LAUNCH_PORTS)" % (count, low, high))


_NEXT_PORT = None


def port_range():
    """(low, high) of the ports free_ports hands out: LAUNCH_PORTS=LOW-HIGH, or from 10000 to
    just below the kernel's ephemeral range."""
    text = os.environ.get("LAUNCH_PORTS")
    if text:
        match = re.match(r"^(\d+)-(\d+)$", text.strip())
        if not match or not 1024 <= int(match.group(1)) <= int(match.group(2)) <= 65535:
            raise ValueError("LAUNCH_PORTS must be LOW-HIGH with 1024 <= LOW <= HIGH <= 65535, "
                             "or unset, got %r" % text)
        return int(match.group(1)), int(match.group(2))
    return 10000, max(first_ephemeral_port() - 1, 10000 + 999)


def first_ephemeral_port():
    """Where the kernel's range for the local ports of outgoing connections starts
    (net.ipv4.ip_local_port_range; 32768, Linux's default, if it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ephemeral:
            return int(ephemeral.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def die_with_parent():
    """Runs in each child before exec: its own process group, and SIGKILL if we die."""
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def describe_exit(code):
    return "died (signal %d)" % -code if code < 0 else "exit code %d" % code


class Console:
    """The launcher's terminal, shared by every task's reader thread: whole lines, one at a
    time. Its reader may go away (`| head`, `less` quit): the first write that finds the pipe
    closed sets `closed`, and the stream is pointed at /dev/null, so that neither a later write
    nor Python's flush at exit prints a BrokenPipeError. After that nothing more is written."""

    def __init__(self):
        self.closed = False
        # The RESULT lines are for programs (the tests, the benchmark, a pipe): a person at a
        # terminal reads the table that is made from them.
        self.shows_results = not sys.stdout.isatty()
        self._lock = threading.Lock()

    def print(self, line, stream=None):
        stream = stream or sys.stdout
        with self._lock:
            if self.closed:
                return
            try:
                stream.write(line + "\n")
                stream.flush()
            except BrokenPipeError:
                self.closed = True
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


class Task:
    """One ps or worker. `process` is its latest incarnation; `lines` holds what every
    incarnation printed, in order (a restart keeps the lines of the one that died), and
    `restarts` counts the restarts."""

    def __init__(self, job, index):
        self.job, self.index = job, index
        self.name = "%s%d" % (job, index)
        self.process = None
        self.lines = []
        self.reader = None
        self.done = False  # the latest process has exited and all its output has been read
        self.restarts = 0
        self.command, self.env = None, None  # of the latest start: a restart reuses them

    @property
    def returncode(self):
        return self.process.poll() if self.process else None

    def result(self):
        """The RESULT of the last incarnation that printed one."""
        for line in reversed(self.lines):
            match = RESULT_PATTERN.match(line)
            if match and match.group(1) == self.name:
                return json.loads(match.group(2))
        return None


def start_process(command, env, cwd):
    """A task's process: its output (stdout and stderr) in one pipe, its own process group."""
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, cwd=cwd, preexec_fn=die_with_parent)


class LocalCluster:
    """Parameter servers and workers of one example script, as processes on this machine.
    `spawn(command, env, cwd)` starts each (the tests start theirs from a pre-loaded
    interpreter: tests/zygote.py)."""

    spawn = staticmethod(start_process)

    def __init__(self, script, workers=2, ps=None, args=(), python=None, env=None, echo=True,
                 host="localhost", ports=None, task_env=None, task_args=None):
        self.script, self.args, self.echo = os.path.abspath(script), list(args), echo
        ps = default_parameter_servers(self.script) if ps is None else ps
        self.python = python or sys.executable
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self.task_env = task_env or {}  # {"worker1": {"VAR": "value"}}: one task's environment
        self.task_args = task_args or {}  # {"worker1": ["--step_delay", "0.01"]}: its own flags
        ports = ports or free_ports(ps + workers)
        self.ps_hosts = ["%s:%d" % (host, port) for port in ports[:ps]]
        self.worker_hosts = ["%s:%d" % (host, port) for port in ports[ps:]]
        self.tasks = ([Task("ps", index) for index in range(ps)]
                      + [Task("worker", index) for index in range(workers)])
        self.console = Console()
        self._changed = threading.Condition()
        self.interrupted = False

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()

    def task(self, name):
        return next(task for task in self.tasks if task.name == name)

    def command(self, task):
        return [self.python, self.script, "--job_name", task.job, "--task_index", str(task.index),
                "--ps_hosts", ",".join(self.ps_hosts),
                "--worker_hosts", ",".join(self.worker_hosts)] + self.args + list(
                    self.task_args.get(task.name, []))

    def start(self, names=None):
        for task in self.tasks:
            if names is None or task.name in names:
                self.start_task(task, self.command(task))
        return self

    def start_task(self, task, command, env=None):
        """Start a task afresh: no output, no restarts yet. A task started again after it was
        killed waits for its old reader first, so that the old process's end is never taken
        for the new one's."""
        if task.reader is not None:
            task.reader.join(10)  # its process has ended: the reader is at the end of its pipe
        task.lines, task.restarts = [], 0
        task.command = list(command)
        task.env = dict(self.env, **self.task_env.get(task.name, {}), **(env or {}))
        self._spawn(task)

    def restart(self, task):
        """Start an ended task again with exactly its last command line and environment,
        keeping the output it printed so far."""
        assert task.done, "%s is still running" % task.name
        _signal_group(task.process.pid, signal.SIGKILL)  # anything its group left
        task.reader.join()
        task.restarts += 1
        self._spawn(task)

    def _spawn(self, task):
        task.done = False
        task.process = self.spawn(task.command, task.env, os.path.dirname(self.script))
        task.reader = threading.Thread(target=self._read, args=(task, task.process), daemon=True)
        task.reader.start()

    def _read(self, task, process):
        """Collect (and echo) one incarnation's output until it exits. It goes on reading after
        the console is closed, so that no task blocks on a full pipe before it is stopped."""
        prefix = "[%s]" % task.name
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._changed:
                task.lines.append(line)
                self._changed.notify_all()
            if self.echo and (self.console.shows_results or not RESULT_PATTERN.match(line)):
                self.console.print(line if line.startswith(prefix) else "%s %s" % (prefix, line))
                if self.console.closed:
                    with self._changed:
                        self._changed.notify_all()
        process.stdout.close()  # at its end: a long session of clusters holds no stale pipes
        process.wait()
        with self._changed:
            if task.process is process:  # not started again meanwhile (start_task after a kill)
                task.done = True
            self._changed.notify_all()

    def interrupt(self):
        """For a signal handler: the next look of wait_for raises KeyboardInterrupt. (Raised by
        the handler itself, it could land inside Condition.wait as it takes its lock again,
        and leaving the `with` would then fail to release a lock it does not hold.)"""
        self.interrupted = True

    def wait_for(self, predicate, timeout):
        """Block until predicate() is true (re-checked whenever a task prints or ends, and at
        least every 0.2 s for an interrupt)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                if self.interrupted:
                    raise KeyboardInterrupt
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.2))
            return True

    def wait_for_line(self, name, pattern, timeout):
        task, regex = self.task(name), re.compile(pattern)
        return self.wait_for(lambda: any(regex.search(line) for line in task.lines)
                             or task.returncode is not None, timeout) and any(
            regex.search(line) for line in task.lines)

    def finished(self):
        return all(task.process is None or task.done for task in self.tasks)

    def failed(self):
        return [task for task in self.tasks if task.returncode not in (None, 0)]

    def wait(self, timeout, stop_on_failure=True):
        """Wait until every task has ended (or, with stop_on_failure, one has failed)."""
        ended = self.wait_for(lambda: self.finished() or (stop_on_failure and self.failed()),
                              timeout)
        return ended and self.finished()

    def kill(self, name, sig=signal.SIGKILL):
        task = self.task(name)
        if task.returncode is None:
            os.killpg(task.process.pid, sig)

    def stop(self, grace=3.0):
        """End every task still running: SIGTERM to its process group, SIGKILL after grace.
        Returns the tasks that were still running."""
        running = [task for task in self.tasks if task.process and task.returncode is None]
        for task in running:
            _signal_group(task.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for task in running:
            try:
                task.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(task.process.pid, signal.SIGKILL)
                task.process.wait()
        for task in self.tasks:
            if task.process:
                _signal_group(task.process.pid, signal.SIGKILL)  # anything its group left
                if task.reader:
                    task.reader.join(5)
        return running

    def results(self):
        return [result for result in (task.result() for task in self.tasks) if result]

    def returncodes(self):
        return {task.name: task.returncode for task in self.tasks}


def _signal_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class BadInput(Exception):
    """A task exited with code 2: its command line is wrong."""

    def __init__(self, task):
        super().__init__(task.name)
        self.task = task


def supervise(cluster, restart, max_restarts, grace, timeout, say):
    """Wait until every task has ended by itself, dealing with each end as it comes: a task that
    failed is restarted (restart="on-failure", up to max_restarts times each) or reported, and
    the others carry on for at most `grace` seconds more: asynchronous training can finish
    without a dead worker. Returns None when every task ended by itself or the output was
    closed, else why it stopped waiting (the timeout or the grace period ran out). A task that
    exits with bad input raises BadInput: the command line is the same for every task, and
    retrying it cannot help."""
    deadline = time.monotonic() + timeout
    failure = None  # (task, when) of the first failure that was not restarted
    dealt_with = set()  # the processes whose end has been dealt with

    def newly_ended():
        return [task for task in cluster.tasks
                if task.process and task.done and task.process not in dealt_with]

    while True:
        limit = deadline if failure is None else min(deadline, failure[1] + grace)
        cluster.wait_for(lambda: cluster.console.closed or newly_ended() or cluster.finished(),
                         limit - time.monotonic())
        if cluster.console.closed:
            return None
        for task in newly_ended():
            dealt_with.add(task.process)
            code = task.returncode
            if code == 0:
                continue
            if code == BAD_INPUT:
                raise BadInput(task)
            if restart == "on-failure" and task.restarts < max_restarts:
                say("[launch] %s %s; restarting it with the same command line (restart %d of %d)"
                    % (task.name, describe_exit(code), task.restarts + 1, max_restarts))
                cluster.restart(task)
                say("[launch] %s restarted (pid %d)" % (task.name, task.process.pid))
                continue
            say("[launch] %s %s; not restarting it (%s)" % (
                task.name, describe_exit(code), "RESTART=on-failure would" if restart == "never"
                else "restarted %d time(s) already; MAX_RESTARTS=%d" % (task.restarts,
                                                                         max_restarts)))
            failure = failure or (task, time.monotonic())
        if cluster.finished():
            return None
        if time.monotonic() >= limit:
            running = ", ".join(task.name for task in cluster.tasks if not task.done)
            if failure and limit < deadline:
                return "%s still running %g s after %s failed (--grace); every task was stopped" \
                    % (running, grace, failure[0].name)
            return "not finished after %g s; every task was stopped" % timeout


def ending(task, stopped):
    return "stopped by the launcher" if task in stopped else describe_exit(task.returncode)


def results_table(tasks, wall_seconds, stopped=()):
    """One row per task that printed a RESULT, and one per task that did not exit 0 without
    one, saying how it died or that the launcher stopped it (`stopped`); in task order."""
    columns = ["task", "global_step", "local_steps", "train_loss", "test_accuracy",
               "steps_per_second", "wall_seconds"]
    results, rows = [], []  # a row: every column, or a task's name and how it ended
    for task in tasks:
        result = task.result()
        if result:
            results.append(result)
            rows.append([task.name] + [str(result.get(column)) for column in columns[1:]])
        elif task.returncode != 0:
            rows.append([task.name, ending(task, stopped)])
    if not rows:
        return "no RESULT lines"
    full = [columns] + [row for row in rows if len(row) == len(columns)]
    widths = [max(len(row[i]) for row in full) for i in range(len(columns))]
    widths[0] = max(len(row[0]) for row in [columns] + rows)

    def line(row):
        if len(row) == len(columns):
            return "  ".join(cell.rjust(width) for cell, width in zip(row, widths))
        return "%s  %s" % (row[0].rjust(widths[0]), row[1])

    lines = [line(columns), "  ".join("-" * width for width in widths)] + list(map(line, rows))
    if results:
        total = sum(r["steps_per_second"] or 0 for r in results)
        lines.append("%s: %d worker(s), %.0f steps/s together, %.1f s from launch to the end"
                     % (results[0]["algorithm"], len(results), total, wall_seconds))
    return "\n".join(lines)


LAUNCHER_VARIABLES = """\
run.sh (tools/launch) itself reads these environment variables:
  WORKERS=N             the number of workers (now %d)
  RESTART=on-failure    start a task that failed again, with the same command line, as
                        Kubernetes' restartPolicy OnFailure would (default: never; a dead task
                        is reported, and the others may finish without it)
  MAX_RESTARTS=N        restarts per task with RESTART=on-failure (now %d)
  PYTHON=/path/python   the interpreter (default: the project's .venv)
  LAUNCH_NETWORK=host   run on this machine's network, not in a private loopback-only one
                        (needed for --dataset mnist's first download)
  LAUNCH_PORTS=LOW-HIGH the free ports to give the tasks from (default: 10000 up to the
                        kernel's ephemeral range, which outgoing connections take theirs from)"""


def show_help(options, console):
    """The example's own --help (the script alone, no cluster), then the launcher's variables."""
    process = subprocess.run([sys.executable, options.script] + options.args,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, cwd=os.path.dirname(options.script) or ".",
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    for line in process.stdout.decode("utf-8", "replace").splitlines():
        console.print(line)
    if process.returncode == 0:
        console.print("\n" + LAUNCHER_VARIABLES % (options.workers, options.max_restarts))
    return CLOSED_PIPE if console.closed else process.returncode


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad input ends with one line that names the problem, and exit code 2."""

    def error(self, message):
        self.exit(2, "launch: error: %s\n" % message)


def main(argv=None):
    parser = OneLineErrorParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int,
                        help="parameter servers (default: 1, or 0 where the script declares "
                             "PARAMETER_SERVERS = 0)")
    parser.add_argument("--gpus", type=int,
                        help="give worker i only GPU i mod N (CUDA_VISIBLE_DEVICES), the ps none; "
                             "0: hide every GPU")
    parser.add_argument("--network", choices=["host", "private"], default="host",
                        help="'private': tools/launch started us in a network namespace of our "
                             "own, with only loopback")
    parser.add_argument("--restart", default="never",
                        help="'on-failure': start a task that failed again, with the same "
                             "command line (RESTART); default: never")
    parser.add_argument("--max_restarts", default="3",
                        help="restarts per task with --restart on-failure (MAX_RESTARTS)")
    parser.add_argument("--grace", type=float, default=180,
                        help="after a task failed for good, stop the others if they are still "
                             "running after this many seconds")
    parser.add_argument("--timeout", type=float, default=900,
                        help="end everything after this many seconds")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    if options.ps is None:
        options.ps = default_parameter_servers(options.script)
    if options.workers < 1 or options.ps < 0:
        parser.error("WORKERS must be at least 1 and the number of ps at least 0, got %d and %d"
                     % (options.workers, options.ps))
    if options.restart not in RESTART_POLICIES:
        parser.error("unknown RESTART %r: use on-failure, or never (the default)"
                     % options.restart)
    if not options.max_restarts.isdigit():
        parser.error("MAX_RESTARTS must be a whole number, 0 or more, got %r"
                     % options.max_restarts)
    options.max_restarts = int(options.max_restarts)
    try:
        port_range()
    except ValueError as error:
        parser.error(str(error))
    started = time.time()
    signal.signal(signal.SIGTERM, _interrupted)
    if "-h" in options.args or "--help" in options.args:
        try:
            return show_help(options, Console())
        except KeyboardInterrupt:
            return 130
    task_env = {}
    if options.gpus is not None:
        task_env = {"worker%d" % index: {"CUDA_VISIBLE_DEVICES": str(index % options.gpus)
                                         if options.gpus else ""}
                    for index in range(options.workers)}
        task_env.update({"ps%d" % index: {"CUDA_VISIBLE_DEVICES": ""}
                         for index in range(options.ps)})
    cluster = LocalCluster(options.script, options.workers, options.ps, options.args,
                           task_env=task_env)
    say = cluster.console.print
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: cluster.interrupt())
    try:
        cluster.start()
        say("[launch] %s: %s; %s" % (os.path.basename(options.script), ", ".join(
            "%s at %s (pid %d)" % (task.name, host, task.process.pid) for task, host in
            zip(cluster.tasks, cluster.ps_hosts + cluster.worker_hosts)),
            "in a private network namespace (loopback only)" if options.network == "private"
            else "on this machine's network: the ports are open on every interface"))
        why = supervise(cluster, options.restart, options.max_restarts, options.grace,
                        options.timeout, say)
    except BadInput as bad:
        cluster.stop()
        say("[launch] error: %s failed (exit code %d); every task was stopped"
            % (bad.task.name, BAD_INPUT), sys.stderr)
        return CLOSED_PIPE if cluster.console.closed else BAD_INPUT  # as the task said
    except KeyboardInterrupt:
        cluster.stop()
        say("[launch] interrupted: every task was stopped", sys.stderr)
        return 130
    return report(cluster, why, cluster.stop(), time.time() - started)


def report(cluster, why, stopped, wall_seconds):
    """The end of a run: the results table, who was restarted, who failed; the exit code."""
    say = cluster.console.print
    say(results_table(cluster.tasks, wall_seconds, stopped))
    restarted = ["%s %d time(s)" % (task.name, task.restarts)
                 for task in cluster.tasks if task.restarts]
    if restarted:
        say("[launch] restarted: " + ", ".join(restarted))
    if why:
        say("[launch] error: " + why, sys.stderr)
    failed = [task for task in cluster.tasks if task.returncode != 0]
    if failed:
        say("[launch] error: %d of %d tasks did not succeed: %s" % (
            len(failed), len(cluster.tasks),
            ", ".join("%s %s" % (task.name, ending(task, stopped)) for task in failed)),
            sys.stderr)
    if cluster.console.closed:
        return CLOSED_PIPE
    return 1 if failed else 0


def _interrupted(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
