"""Run one example as a local cluster: parameter servers and workers on free localhost ports.

Every example's run.sh calls this (through tools/launch). It starts the tasks, shows their output
with [ps0]/[worker1] prefixes, waits for all of them, prints the results table from their RESULT
lines, and exits 0 only if every task did. If a task fails, or on Ctrl-C or SIGTERM, it ends every
task it started (each runs in its own process group, ended by group id, never by name).

    python tools/launch.py [--workers N] [--ps N] EXAMPLE.py [example flags...]

The tests and the benchmark use the same LocalCluster class.
"""
import argparse
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

RESULT_PATTERN = re.compile(r"^\[(\w+)\] RESULT (\{.*\})\s*$")


def free_ports(count, host="127.0.0.1"):
    """Ports nobody listens on now: bound together so that they differ, then released."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _die_with_parent():
    """Runs in each child before exec: its own process group, and SIGKILL if we die."""
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Task:
    def __init__(self, job, index):
        self.job, self.index = job, index
        self.name = "%s%d" % (job, index)
        self.process = None
        self.lines = []
        self.reader = None

    @property
    def returncode(self):
        return self.process.poll() if self.process else None

    def result(self):
        for line in self.lines:
            match = RESULT_PATTERN.match(line)
            if match and match.group(1) == self.name:
                return json.loads(match.group(2))
        return None


class LocalCluster:
    """Parameter servers and workers of one example script, as processes on this machine."""

    def __init__(self, script, workers=2, ps=1, args=(), python=None, env=None, echo=True,
                 host="localhost", ports=None, task_env=None, task_args=None):
        self.script, self.args, self.echo = os.path.abspath(script), list(args), echo
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
        self._changed = threading.Condition()
        self._echo_lock = threading.Lock()

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
        task.lines = []
        task.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(self.env, **self.task_env.get(task.name, {}), **(env or {})),
            cwd=os.path.dirname(self.script), preexec_fn=_die_with_parent)
        task.reader = threading.Thread(target=self._read, args=(task, task.process), daemon=True)
        task.reader.start()

    def _read(self, task, process):
        prefix = "[%s]" % task.name
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._changed:
                task.lines.append(line)
                self._changed.notify_all()
            if self.echo:
                with self._echo_lock:
                    print(line if line.startswith(prefix) else "%s %s" % (prefix, line),
                          flush=True)
        process.wait()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, predicate, timeout):
        """Block until predicate() is true (re-checked whenever a task prints or ends)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def wait_for_line(self, name, pattern, timeout):
        task, regex = self.task(name), re.compile(pattern)
        return self.wait_for(lambda: any(regex.search(line) for line in task.lines)
                             or task.returncode is not None, timeout) and any(
            regex.search(line) for line in task.lines)

    def finished(self):
        return all(task.process is None or (task.returncode is not None
                                            and not task.reader.is_alive())
                   for task in self.tasks)

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
        """End every task still running: SIGTERM to its process group, SIGKILL after grace."""
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

    def results(self):
        return [result for result in (task.result() for task in self.tasks) if result]

    def returncodes(self):
        return {task.name: task.returncode for task in self.tasks}


def _signal_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def results_table(results, wall_seconds):
    columns = ["task", "global_step", "local_steps", "train_loss", "test_accuracy",
               "steps_per_second", "wall_seconds"]
    rows = [["worker%d" % r["task_index"]] + [r.get(c) for c in columns[1:]] for r in results]
    if not rows:
        return "no RESULT lines"
    text = [[str(cell) for cell in row] for row in [columns] + rows]
    widths = [max(len(row[i]) for row in text) for i in range(len(columns))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in text]
    lines.insert(1, "  ".join("-" * width for width in widths))
    total = sum(r["steps_per_second"] or 0 for r in results)
    lines.append("%s: %d worker(s), %.0f steps/s together, %.1f s from launch to the end"
                 % (results[0]["algorithm"], len(results), total, wall_seconds))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=1)
    parser.add_argument("--gpus", type=int,
                        help="give worker i only GPU i mod N (CUDA_VISIBLE_DEVICES), the ps none; "
                             "0: hide every GPU")
    parser.add_argument("--network", choices=["host", "private"], default="host",
                        help="'private': tools/launch started us in a network namespace of our "
                             "own, with only loopback")
    parser.add_argument("--timeout", type=float, default=900,
                        help="end everything after this many seconds")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    if options.workers < 1 or options.ps < 1:
        parser.exit(2, "launch: error: WORKERS and the number of ps must be at least 1, got "
                       "%d and %d\n" % (options.workers, options.ps))
    started = time.time()
    task_env = {}
    if options.gpus is not None:
        task_env = {"worker%d" % index: {"CUDA_VISIBLE_DEVICES": str(index % options.gpus)
                                         if options.gpus else ""}
                    for index in range(options.workers)}
        task_env.update({"ps%d" % index: {"CUDA_VISIBLE_DEVICES": ""}
                         for index in range(options.ps)})
    cluster = LocalCluster(options.script, options.workers, options.ps, options.args,
                           task_env=task_env)

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    try:
        cluster.start()
        print("[launch] %s: %s; %s" % (os.path.basename(options.script), ", ".join(
            "%s at %s (pid %d)" % (task.name, host, task.process.pid) for task, host in
            zip(cluster.tasks, cluster.ps_hosts + cluster.worker_hosts)),
            "in a private network namespace (loopback only)" if options.network == "private"
            else "on this machine's network: the ports are open on every interface"),
            flush=True)
        ended = cluster.wait(options.timeout)
    except KeyboardInterrupt:
        cluster.stop()
        print("[launch] interrupted: every task was stopped", file=sys.stderr)
        return 130
    failed = cluster.failed()
    cluster.stop()
    if not ended and not failed:
        print("[launch] error: not finished after %g s; every task was stopped"
              % options.timeout, file=sys.stderr)
        return 1
    if failed:
        print("[launch] error: %s failed (exit code %s); every task was stopped"
              % (failed[0].name, failed[0].returncode), file=sys.stderr)
        return 1
    print(results_table(sorted(cluster.results(), key=lambda r: r["task_index"]),
                        time.time() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
