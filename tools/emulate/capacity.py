"""The largest emulated cluster this machine holds while its CPUs are not the bottleneck.

An emulated worker's compute time is a sleep, so a cluster of N workers needs little CPU per
worker; but each step still costs TensorFlow some CPU (the example's own model, session.run,
serializing θ and g), and the ps serves every worker. With N large enough the tasks wait for a
CPU, and the workers' steps stretch beyond the emulated compute time: from there on the machine,
not the emulated cluster, sets the pace. So for each N of a sweep, one emulated run of an
asynchronous example (Hogwild by default: every step reads θ from the ps and sends g back,
without waiting for the other workers, the most CPU per second of any algorithm) makes
STEPS_PER_WORKER steps per worker, and each worker's measured compute time per step (the
configured one plus its waits for a CPU) is set beside the configured. The largest N holds when
every worker of every N up to it is within TOLERANCE of its configured compute time.
"""
import json
import os
import time

from .cluster import TOLERANCE, EmulatedCluster, emulation

STEPS_PER_WORKER = 60
DEFAULT_SCRIPT = "Hogwild/Hogwild.py"


def measure(script, scenario, workers, scale, python, steps_per_worker=STEPS_PER_WORKER,
            timeout=600.0, seed=0):
    """One emulated run of N workers: its settings, what was measured, and its tasks' exit
    codes."""
    settings = emulation(script, scenario, workers, scale, seed)
    cluster = EmulatedCluster(script, settings, python=python, args=[
        "--train_steps", str(steps_per_worker * workers), "--log_every", str(steps_per_worker)])
    started = time.time()
    try:
        cluster.start()
        finished = cluster.wait(timeout)
    finally:
        cluster.stop()
    measured = cluster.measured()
    excess = [worker["compute_measured_seconds"] / worker["compute_seconds"] - 1
              for worker in measured["workers"].values() if "compute_measured_seconds" in worker]
    return {"workers": workers, "scenario": scenario, "script": script,
            "finished": finished and set(cluster.returncodes().values()) == {0},
            "returncodes": cluster.returncodes(), "seconds": time.time() - started,
            "emulated": settings, "measured": measured,
            "worst_compute_excess": max(excess) if len(excess) == workers else None}


def holds(run):
    return run["finished"] and run["worst_compute_excess"] is not None and (
        run["worst_compute_excess"] <= TOLERANCE)


def largest(runs):
    """The largest N such that it and every smaller N of the sweep held."""
    best = None
    for run in sorted(runs, key=lambda run: run["workers"]):
        if not holds(run):
            break
        best = run["workers"]
    return best


def sweep(script, scenario, counts, scale, python, record=None, say=print):
    """Measure every N of counts, in order, stopping after the first two that do not hold
    (larger ones would not either); returns (largest N, runs)."""
    runs, failed = [], 0
    for workers in sorted(counts):
        run = measure(script, scenario, workers, scale, python)
        runs.append(run)
        say(line(run))
        if record:
            with open(record, "w") as out:
                json.dump({"machine": machine(), "tolerance": TOLERANCE, "runs": runs,
                           "largest": largest(runs)}, out, indent=1)
        failed += not holds(run)
        if failed >= 2:
            break
    return largest(runs), runs


def line(run):
    measured = run["measured"]
    workers = [w for w in measured["workers"].values() if "compute_measured_seconds" in w]
    if not workers:
        return "%2d workers: no measurement (exit codes %s)" % (run["workers"],
                                                                run["returncodes"])
    mean = lambda key: 1e3 * sum(w[key] for w in workers) / len(workers)  # noqa: E731
    return ("%2d workers: compute %.1f ms configured, %.1f measured (worst worker %+.0f%%), "
            "TensorFlow CPU %.1f ms/step, step %.1f ms; machine busy %.0f%%, load %.1f; %s" % (
                run["workers"], mean("compute_seconds"), mean("compute_measured_seconds"),
                100 * run["worst_compute_excess"], mean("cpu_seconds_per_step"),
                mean("step_seconds"), 100 * (measured["machine_busy_share"] or 0),
                measured["load_average"][0], "holds" if holds(run) else "CPU-bound"))


def markdown(runs, command):
    """The sweep as a Markdown block for the documentation: its command and machine, a row
    per N, and the answer."""
    info = machine()
    lines = ["Measured by `%s` on %d cores and %.0f GiB, Linux, load average %.1f at the end "
             "(the machine is shared), %s:" % (command, info["cores"],
                                               info["memory_bytes"] / 2 ** 30,
                                               info["load_average"][0], info["date"]), "",
             "| workers | compute per step, configured | measured, mean | worst worker | "
             "TensorFlow's CPU per step | step, all in | machine busy | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        workers = [w for w in run["measured"]["workers"].values()
                   if "compute_measured_seconds" in w]
        if not workers:
            lines.append("| %d | - | - | - | - | - | - | no measurement |" % run["workers"])
            continue
        mean = lambda key: 1e3 * sum(w[key] for w in workers) / len(workers)  # noqa: E731
        lines.append("| %d | %.1f ms | %.1f ms | %+.0f %% | %.1f ms | %.1f ms | %.0f %% | %s |" % (
            run["workers"], mean("compute_seconds"), mean("compute_measured_seconds"),
            100 * run["worst_compute_excess"], mean("cpu_seconds_per_step"),
            mean("step_seconds"), 100 * (run["measured"]["machine_busy_share"] or 0),
            "holds" if holds(run) else "CPU-bound"))
    best = largest(runs)
    lines += ["", "Largest cluster whose every worker keeps its compute time within %d %%: %s."
              % (100 * TOLERANCE, "%d workers" % best if best else "none")]
    return "\n".join(lines)


def machine():
    """What the answer depends on: cores, memory, load."""
    with open("/proc/meminfo") as info:
        memory = int(info.readline().split()[1]) * 1024
    return {"cores": os.cpu_count(), "memory_bytes": memory,
            "load_average": list(os.getloadavg()),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}
