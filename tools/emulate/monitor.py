"""What the emulated cluster really did, sampled while it runs: the bytes on every link and
the CPU each task used and waited for.

Every INTERVAL seconds a thread in the switch's namespace reads every link's counters
(/proc/thread-self/net/dev: one read for all links) and, for every task's process, the CPU
time it has used and the time its main thread has spent runnable but waiting for a CPU (the
scheduler's statistics). From those samples come the measured link rates and each worker's
compute time per step.
"""
import os
import threading
import time

from .network import in_namespace

INTERVAL = 0.1
WINDOW = 1.0  # seconds over which a link's peak rate is taken


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_of(pid):
    """(seconds on a CPU, seconds its main thread waited for one) of process pid so far, or
    None if it has ended. The first counts every thread (/proc/PID/stat), the second the main
    thread (/proc/PID/schedstat): the Python thread that runs the training loop, sleeps the
    compute time and waits for each session.run, so that its wait is a delay of the process
    (the waits of several threads may overlap)."""
    try:
        with open("/proc/%d/stat" % pid) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/%d/schedstat" % pid) as stats:
            waited = int(stats.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS, waited / 1e9  # utime, stime


def state_of(pid):
    """The scheduler state of process pid's main thread: R running, S asleep, D in a disk
    read, ... (None if it has ended)."""
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def machine_busy():
    """(busy, total) jiffies of all CPUs so far, from /proc/stat: every process's, ours and
    others'."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


class Monitor:
    """Samples [(time, {host: (bytes to it, bytes from it)}, {task: cpu_of(its pid)})] from
    start() to stop(); pids() gives the task processes to watch now: those started and not
    done training."""

    def __init__(self, network, pids):
        self.network, self.pids = network, pids
        self.samples = []
        self._stop = threading.Event()
        self._thread = None
        self.busy_at_start = self.busy_at_stop = None

    def sample(self, counters_text):
        return (time.time(), self.network.parse_counters(counters_text),
                {name: cpu for name, cpu in ((name, cpu_of(pid)) for name, pid in
                                             self.pids().items()) if cpu is not None})

    def start(self):
        self.busy_at_start = machine_busy()

        def loop():
            while True:
                with open("/proc/thread-self/net/dev") as counters:
                    self.samples.append(self.sample(counters.read()))
                if self._stop.wait(INTERVAL):
                    with open("/proc/thread-self/net/dev") as counters:
                        self.samples.append(self.sample(counters.read()))
                    return

        self._thread = threading.Thread(
            target=lambda: in_namespace(self.network.switch, loop, thread=False), daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._thread:
            self._stop.set()
            self._thread.join(10)
            self._thread = None
            self.busy_at_stop = machine_busy()
        return self.samples


def rates(samples, host, since=None, until=None):
    """host's link between since and until, each way: (mean bits/s, peak bits/s over WINDOW),
    as {"to": ..., "from": ...}."""
    kept = [(t, links[host]) for t, links, _ in samples if host in links
            and (since is None or t >= since) and (until is None or t <= until)]
    out = {}
    for way, index in (("to", 0), ("from", 1)):
        if len(kept) < 2 or kept[-1][0] <= kept[0][0]:
            out[way] = {"mean": None, "peak": None}
            continue
        mean = 8.0 * (kept[-1][1][index] - kept[0][1][index]) / (kept[-1][0] - kept[0][0])
        peak = None
        start = 0
        for end in range(1, len(kept)):
            while kept[end][0] - kept[start + 1][0] >= WINDOW and start + 1 < end:
                start += 1
            span = kept[end][0] - kept[start][0]
            if span >= WINDOW * 0.9:
                rate = 8.0 * (kept[end][1][index] - kept[start][1][index]) / span
                peak = rate if peak is None else max(peak, rate)
        out[way] = {"mean": mean, "peak": peak}
    return out


def cpu_between(samples, task, start, end):
    """cpu_of's numbers for task between the samples nearest before start and before end."""
    seen = [(t, tasks[task]) for t, _, tasks in samples if task in tasks]
    first = [cpu for t, cpu in seen if t <= start] or [(0.0, 0.0)]
    last = [cpu for t, cpu in seen if t <= end]
    if not last:
        return None
    return tuple(b - a for a, b in zip(first[-1], last[-1]))
