"""One example run as an emulated cluster: real TensorFlow tasks, each in its own network
namespace behind a shaped link, each worker with its own compute time, θ carrying the scaled
bytes of the scenario's model; what it did, measured.

It is tools/launch.py's LocalCluster (the launcher behind every run.sh: ports, output, the
stop by process group) with three changes: every task runs inside its namespace (enter.py),
listening on its own address; the tasks start in two waves, so that nobody trains
while others are still importing TensorFlow; and a Monitor samples the links and the CPUs.

The two waves. Starting TensorFlow costs seconds of CPU per task, and with many tasks on few
cores that start-up would overlap the first steps and slow them, unevenly. So the workers start
first (with no ps, all workers but worker 0), and the emulator waits until each has finished
its start-up and blocks, waiting for the ps (or for worker 0); then the ps tasks (or worker
0) start. The run's time zero, `training_started`, which the comparison measures the time to
the target from, is the moment the first worker's training loop began: its RESULT line's
arrival less the loop's wall_seconds.
"""
import json
import os
import sys
import time

from .monitor import Monitor, cpu_between, cpu_of, rates, state_of
from .network import Network, measure_both_ways
from .scenarios import SCALE, SCENARIOS

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)
from launch import RESULT_PATTERN, LocalCluster, default_parameter_servers  # noqa: E402

PORT = 2222  # every task on its own address, so all on the same port
TOLERANCE = 0.15  # how far a measured rate or compute time may be from the configured one
TIMEOUT = 180.0  # --timeout given to the tasks (unless the caller gives one): the first wave
# waits for the last, and its start-up on a loaded machine may take a minute
# A task is done starting when, over QUIET_WINDOW seconds, it used less than QUIET_CPU of a
# CPU and its main thread waited for one less than QUIET_WAIT of the time (a task that waits
# for the ps still wakes up now and then, and on a busy machine each wake-up waits a little;
# a task still starting up but short of CPU waits most of the time).
QUIET_WINDOW, QUIET_CPU, QUIET_WAIT = 0.4, 0.10, 0.25


def emulation(script, scenario, workers, scale=SCALE, seed=0):
    """The emulated settings of script's cluster of `workers` in the named scenario (its ps
    tasks: as many as the script's launcher starts)."""
    return SCENARIOS[scenario].emulated(workers, default_parameter_servers(script), scale, seed)


class TimedCluster(LocalCluster):
    """A LocalCluster that notes when each worker's RESULT line arrives, hence when its
    training loop began and ended (the RESULT's wall_seconds is the loop's length)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trained = {}  # worker: when its RESULT line arrived
        self.reported = {}  # worker: its RESULT

    def wait_for(self, predicate, timeout):
        """LocalCluster's, which checks predicate whenever a task prints: each RESULT line's
        arrival is noted there, as it comes."""
        def noting():
            self.note_results()
            return predicate()
        return super().wait_for(noting, timeout)

    def note_results(self):
        for task in self.tasks:
            if task.job == "worker" and task.name not in self.trained:
                found = next((match for match in map(RESULT_PATTERN.match, task.lines)
                              if match), None)
                if found:  # (under any name: the one-process baseline says "[local]")
                    self.trained[task.name] = time.time()
                    self.reported[task.name] = json.loads(found.group(2))

    def training_window(self, name):
        """(start, end) of worker name's training loop: its RESULT line's arrival, less the
        wall_seconds that the RESULT says the loop took."""
        if name not in self.trained:
            return None
        return self.trained[name] - self.reported[name]["wall_seconds"], self.trained[name]

    @property
    def training_started(self):
        """When the first worker's training loop began: the run's time zero."""
        starts = [window[0] for window in map(self.training_window, (
            task.name for task in self.tasks if task.job == "worker")) if window]
        return min(starts) if starts else None


class EmulatedCluster(TimedCluster):
    """An example's ps and workers on the emulated network of `emulation` (a Scenario's
    emulated() settings). args go to every task, as in LocalCluster; each worker also gets its
    own --step_delay, and every task --payload_mb."""

    def __init__(self, script, emulation, args=(), python=None, echo=False, env=None,
                 task_args=None):
        workers, ps = emulation["workers"], emulation["parameter_servers"]
        args = list(args) + ["--payload_mb", "%.6f" % emulation["payload_mb"]]
        if "--timeout" not in args:
            args += ["--timeout", "%g" % TIMEOUT]
        own = {"worker%d" % index: ["--step_delay", "%.6f" % seconds]
               for index, seconds in enumerate(emulation["compute_seconds"])}
        for name, extra in (task_args or {}).items():
            own[name] = own.get(name, []) + list(extra)
        super().__init__(script, workers=workers, ps=ps, args=args, python=python, env=env,
                         echo=echo, ports=[PORT] * (ps + workers), task_args=own)
        self.emulation = emulation
        rate = emulation["link_bits_per_second"]
        self.network = Network({task.name: rate for task in self.tasks})
        self.ps_hosts = ["%s:%d" % (self.network.addresses[t.name], PORT)
                         for t in self.tasks if t.job == "ps"]
        self.worker_hosts = ["%s:%d" % (self.network.addresses[t.name], PORT)
                             for t in self.tasks if t.job == "worker"]
        self.monitor = Monitor(self.network, self.pids)
        self.link_check = None
        self.processes_started = self.last_wave_started = None
        self._quiet = {}  # task: [(time, CPU seconds used, waited)] of its last moments

    def pids(self):
        """The tasks to watch: started, and (workers) not done training."""
        return {task.name: task.process.pid for task in self.tasks
                if task.process and task.name not in self.trained}

    def command(self, task):
        python, script, *args = super().command(task)
        return self.network.python_command(task.name, python, script, args)

    def last_wave(self):
        """The tasks everyone else waits for: the ps tasks, or worker 0 where there is none."""
        parameter_servers = [task for task in self.tasks if task.job == "ps"]
        return parameter_servers or [self.tasks[0]]

    def start(self, names=None):
        """The network, a check of its links, then the two waves of tasks."""
        assert names is None, "an emulated cluster starts whole"
        try:
            self.network.create()
            self.check_links()
            self.monitor.start()
            last = self.last_wave()
            self.processes_started = time.time()
            for task in self.tasks:
                if task not in last:
                    self.start_task(task, self.command(task))
            self.wait_for(lambda: self.failed() or all(
                self.done_starting(task) for task in self.tasks if task not in last), TIMEOUT / 2)
            self.last_wave_started = time.time()
            for task in last:
                self.start_task(task, self.command(task))
        except BaseException:
            self.stop()
            raise
        return self

    def done_starting(self, task):
        """Whether task has finished its start-up and now waits: its main thread asleep (not
        in a disk read), and quiet over the last QUIET_WINDOW seconds."""
        if task.process is None or task.returncode is not None:
            return True
        now = cpu_of(task.process.pid)
        if now is None:
            return True
        history = self._quiet.setdefault(task.name, [])
        history.append((time.monotonic(),) + now)
        while len(history) > 2 and history[1][0] <= history[-1][0] - QUIET_WINDOW:
            history.pop(0)
        (then, used, waited), (now_, using, waiting) = history[0], history[-1]
        elapsed = now_ - then
        return (elapsed >= QUIET_WINDOW and state_of(task.process.pid) == "S"
                and using - used < QUIET_CPU * elapsed and waiting - waited < QUIET_WAIT * elapsed)

    def check_links(self):
        """Bulk TCP transfers each way between a worker and the task of the last wave
        (link_check: bits/s each way), before any task starts (a sender short of CPU would
        measure less): the rate the shaped path really delivers, the best of up to 10 each way,
        or of those up to the first within 15 % of the slower link's configured rate."""
        last = self.last_wave()[0].name
        other = next((task.name for task in self.tasks if task.name != last), None)
        rates = [self.network.rates[name] for name in (other, last) if self.network.rates[name]]
        self.link_check = measure_both_ways(
            self.network, other, last, tries=10,
            enough=(1 - TOLERANCE) * min(rates) if rates else float("inf")) if other else None

    def stop(self, grace=3.0):
        try:
            running = super().stop(grace)
        finally:
            self.monitor.stop()
            self.network.delete()
        return running

    def measured(self):
        """The emulated settings beside what was measured, for the run's record. A worker's
        compute time per step as it slept it (its --step_delay sleep, timed by the example),
        and with what this machine added: the configured time plus the time its main thread
        waited for a CPU, per step of its training loop (CPU contention). TensorFlow's own CPU time per
        step is given beside it: a cost of the example on this machine, not emulated."""
        samples, since = self.monitor.samples, self.training_started
        workers, ends, steps_made = {}, [], 0
        for index, configured in enumerate(self.emulation["compute_seconds"]):
            name = "worker%d" % index
            workers[name] = {"compute_seconds": configured}
            window = self.training_window(name)
            used = window and cpu_between(samples, name, *window)
            steps = window and self.reported[name].get("local_steps")
            if not used or not steps:
                continue
            on_cpu, waited = used
            ends.append(window[1])
            steps_made += steps
            workers[name].update({
                "compute_slept_seconds": self.reported[name].get("slept_seconds", 0) / steps,
                "compute_measured_seconds": configured + waited / steps,
                "cpu_seconds_per_step": on_cpu / steps, "cpu_wait_seconds_per_step":
                    waited / steps, "step_seconds": (window[1] - window[0]) / steps})
        link = self.last_wave()[0].name
        until = max(ends) if ends else None
        moved = self.link_bytes(link, since, until)
        busy = None
        if self.monitor.busy_at_start and self.monitor.busy_at_stop:
            (busy0, total0), (busy1, total1) = (self.monitor.busy_at_start,
                                                self.monitor.busy_at_stop)
            busy = (busy1 - busy0) / max(total1 - total0, 1)
        return {
            "link": link, "link_bits_per_second": self.emulation["link_bits_per_second"],
            "link_check_bits_per_second": self.link_check,
            "link_during_run_bits_per_second": rates(samples, link, since, until),
            "bytes_per_worker_step": moved / steps_made if steps_made and moved else None,
            "workers": workers, "processes_started": self.processes_started,
            "training_started": since,
            "start_up_seconds": since - self.processes_started if since else None,
            "machine_busy_share": busy, "load_average": list(os.getloadavg())}

    def link_bytes(self, host, since, until):
        """Bytes on host's link, both ways, between since and until."""
        kept = [links[host] for t, links, _ in self.monitor.samples
                if host in links and since and until and since <= t <= until]
        return sum(kept[-1]) - sum(kept[0]) if len(kept) >= 2 else None


def describe_measured(emulation, measured):
    """A few lines for people: configured and measured, side by side."""
    lines = []
    check = measured["link_check_bits_per_second"] or {}
    lines.append("links: %.1f Mb/s configured; bulk TCP through them %s" % (
        emulation["link_bits_per_second"] / 1e6, ", ".join(
            "%s %.1f Mb/s" % (way.replace("_", " "), rate / 1e6)
            for way, rate in sorted(check.items()) if rate) or "not measured"))
    during = measured["link_during_run_bits_per_second"]
    lines.append("%s's link during training: %s" % (measured["link"], ", ".join(
        "%s it mean %s, peak %s Mb/s" % (way, fmt_rate(during[way]["mean"]),
                                        fmt_rate(during[way]["peak"])) for way in ("to", "from"))))
    for name, worker in sorted(measured["workers"].items(), key=lambda item: int(item[0][6:])):
        if "compute_measured_seconds" in worker:
            lines.append("%s: compute %.1f ms/step configured, %.1f slept, %.1f with the "
                         "waits for a CPU (%.1f); TensorFlow's own CPU %.1f ms/step; %.1f ms per "
                         "step in all" % (
                             name, 1e3 * worker["compute_seconds"],
                             1e3 * worker["compute_slept_seconds"],
                             1e3 * worker["compute_measured_seconds"],
                             1e3 * worker["cpu_wait_seconds_per_step"],
                             1e3 * worker["cpu_seconds_per_step"],
                             1e3 * worker["step_seconds"]))
    return lines


def fmt_rate(bits):
    return "-" if bits is None else "%.1f" % (bits / 1e6)
