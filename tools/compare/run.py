"""Running the plan: each configuration as a real local cluster, always stopped, its RESULT
lines kept in raw.json, which is saved after every run so that an interrupted comparison keeps
what it measured."""
import json
import os
import platform
import subprocess
import sys
import time

from . import plan
from .metrics import run_metrics

# tools/launch.py, the launcher behind every run.sh: one ps and the workers on free ports.
TOOLS = os.path.join(plan.ROOT, "tools")
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)
from launch import RESULT_PATTERN, LocalCluster  # noqa: E402
from emulate import EmulatedCluster, TimedCluster, emulation  # noqa: E402

RAW_FILE = "raw.json"

# Asked of the interpreter that runs the examples, from its installed packages' metadata: its
# TensorFlow may differ from, or not be importable in, the one that runs this tool.
VERSION_PROBE = """
import platform
names = ["tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos", "tf-nightly"]
version = None
try:
    from importlib.metadata import version as installed, PackageNotFoundError as missing
except ImportError:  # Python 3.7: pkg_resources
    import pkg_resources
    installed, missing = (lambda name: pkg_resources.get_distribution(name).version,
                          pkg_resources.DistributionNotFound)
for name in names:
    try:
        version = installed(name)
        break
    except missing:
        pass
if version is None:  # installed some other way: ask the module itself (slower)
    try:
        import tensorflow
        version = tensorflow.__version__
    except Exception as error:
        version = "not importable (%s)" % type(error).__name__
print(platform.python_version())
print(version)
"""


def machine_description(python):
    """Cores, platform, versions and load: what a reader needs to weigh the times."""
    try:
        text = subprocess.run([python, "-c", VERSION_PROBE], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=120,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).stdout.decode()
        python_version, tf_version = text.strip().splitlines()[-2:]
    except (subprocess.SubprocessError, OSError, ValueError):
        python_version, tf_version = "unknown", "unknown"
    import matplotlib
    return {"cores": os.cpu_count(), "platform": platform.platform(terse=True),
            "python": python_version, "tensorflow": tf_version,
            "matplotlib": matplotlib.__version__,
            "load_average_at_start": [round(load, 2) for load in os.getloadavg()],
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def save_raw(raw, output):
    """Write raw.json atomically: a comparison stopped mid-write keeps the previous file."""
    path = os.path.join(output, RAW_FILE)
    with open(path + ".tmp", "w") as out:
        json.dump(raw, out, indent=1)
    os.replace(path + ".tmp", path)


def clock(seconds):
    seconds = int(round(seconds))
    if seconds >= 3600:
        return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)
    return "%d:%02d" % (seconds // 60, seconds % 60)


def cluster_for(config, settings, echo):
    """The cluster of one configuration; the straggler gets its own --step_delay. Emulated:
    the scenario's cluster (the one-process baseline: one process with the compute time per
    step of the scenario's one-worker cluster, and no network)."""
    script = os.path.join(plan.ROOT, config["script"])
    if config.get("scenario"):
        emulated = emulation(script, config["scenario"], config["workers"],
                             settings["emulate"]["scale"], settings["seed"])
        if config["family"] != "baseline":
            return EmulatedCluster(script, emulated, args=config["args"],
                                   python=settings["python"], echo=echo)
        mean = sum(emulated["compute_seconds"]) / len(emulated["compute_seconds"])
        return TimedCluster(script, workers=1, ps=0, python=settings["python"], echo=echo,
                            args=config["args"] + ["--step_delay", "%.6f" % mean])
    task_args = ({config["straggler_task"]: ["--step_delay", "%g" % config["straggler_delay"]]}
                 if config["straggler_task"] else None)
    return LocalCluster(script, workers=config["workers"],
                        # (ps None: the script says how many, none for the ps-less examples)
                        ps=0 if config["family"] == "baseline" else None, args=config["args"],
                        python=settings["python"], echo=echo, task_args=task_args)


def run_config(config, settings, repeat, echo=False):
    """Run one configuration to its end (or its timeout); returns the raw record."""
    cluster = cluster_for(config, settings, echo)
    record = {"key": config["key"], "repeat": repeat, "launched": time.time()}
    try:
        if config["family"] == "baseline":  # one process, no cluster flags
            cluster.start_task(cluster.task("worker0"),
                               [cluster.python, cluster.script] + cluster.args)
        else:
            cluster.start()
        ended = cluster.wait(settings["run_timeout"])
        record["ended"] = time.time()
        record["load_average"] = round(os.getloadavg()[0], 2)  # how busy the machine was
        failed = {task.name: task.returncode for task in cluster.failed()}  # before the stop
    finally:
        cluster.stop()
    record["pids"] = {task.name: task.process.pid for task in cluster.tasks if task.process}
    lines = [line for task in cluster.tasks for line in task.lines]
    results = [json.loads(match.group(2)) for match in map(RESULT_PATTERN.match, lines) if match]
    record["results"] = sorted((r for r in results if r.get("job") == "worker"),
                               key=lambda r: r["task_index"])
    record["exit_codes"] = cluster.returncodes()
    error = run_error(failed, ended, len(record["results"]), config, settings)
    record["ok"] = error is None
    if config.get("scenario"):
        emulated_record(record, config, cluster, settings)
    if error:
        record["error"] = error
        record["output_tail"] = "\n".join(
            "[%s] %s" % (task.name, line) for task in cluster.tasks for line in task.lines[-15:])
    return record


def emulated_record(record, config, cluster, settings):
    """An emulated run's record also holds the emulated settings and what was measured, and
    its time zero (`launched`) is when training began: the first worker's training loop (its
    RESULT's wall_seconds before the RESULT), not when the first process started (kept as
    `processes_launched`): TensorFlow's start-up is not part of the emulated cluster. Flat
    fields say the essentials of the run in one place."""
    record["processes_launched"] = record["launched"]
    record["launched"] = cluster.training_started or record["launched"]
    if isinstance(cluster, EmulatedCluster):
        record["emulated"], record["measured"] = cluster.emulation, cluster.measured()
    numbers = run_metrics(record, settings["target"], settings["batch_size"])
    measured = record.get("measured", {})
    computes = [worker.get("compute_measured_seconds")
                for worker in measured.get("workers", {}).values()]
    checks = [rate for rate in (measured.get("link_check_bits_per_second") or {}).values()
              if rate]
    emulated = record.get("emulated", {})
    record.update({
        "algorithm": config["algorithm"], "workers": config["workers"],
        "scenario": config["scenario"], "time_to_target_s": numbers["time_to_target"],
        "test_accuracy": numbers["final_accuracy"],
        "link_bits_per_second": emulated.get("link_bits_per_second"),
        "link_measured_bits_per_second": min(checks) if checks else None,
        "compute_seconds": (sum(emulated["compute_seconds"]) / len(emulated["compute_seconds"])
                            if emulated else None),
        "compute_measured_seconds": (sum(computes) / len(computes)
                                     if computes and None not in computes else None)})


def run_error(failed, ended, results, config, settings):
    """Why a run does not count, or None."""
    if failed:
        return "%s failed (exit code %s); the other tasks were stopped" % (
            ", ".join(failed), ", ".join(str(code) for code in failed.values()))
    if not ended:
        return ("not finished after %g s (--run_timeout); every task was stopped"
                % settings["run_timeout"])
    if results != config["workers"]:
        return "%d RESULT line(s) from %d worker(s)" % (results, config["workers"])
    return None


def run_all(raw, output, echo=False):
    """Every configuration once per repeat, repeats interleaved (so that a machine that gets
    busier later favours no algorithm, and repeat r of every configuration saw the same
    conditions), with progress and an ETA. Returns the seconds it took."""
    settings = raw["settings"]
    done = {(run["key"], run["repeat"]) for run in raw["runs"]}  # (kept by --resume)
    queue = [(repeat, config) for repeat in range(settings["repeats"]) for config in raw["plan"]
             if (config["key"], repeat) not in done]
    started = time.time()
    for number, (repeat, config) in enumerate(queue, 1):
        done = number - 1
        eta = ("ETA %s" % clock((time.time() - started) / done * (len(queue) - done))
               if done else "ETA after the first run")
        print("[compare] run %d/%d (%d left after it): %s, --train_steps %d, repeat %d/%d; "
              "elapsed %s, %s" % (number, len(queue), len(queue) - number, plan.describe(config),
                                  config["train_steps"], repeat + 1, settings["repeats"],
                                  clock(time.time() - started), eta), flush=True)
        record = run_config(config, settings, repeat, echo)
        raw["runs"].append(record)
        save_raw(raw, output)
        print_outcome(record, settings)
    return time.time() - started


def print_outcome(record, settings):
    if not record["ok"]:
        print("[compare]   FAILED: %s\n%s" % (record["error"], record["output_tail"]),
              file=sys.stderr, flush=True)
        return
    metrics = run_metrics(record, settings["target"], settings["batch_size"])
    reached = ("%.2f reached %.1f s after launch" % (settings["target"], metrics["time_to_target"])
               if metrics["time_to_target"] is not None
               else "%.2f not reached" % settings["target"])
    print("[compare]   done in %.1f s: final test accuracy %.4f, %s, %.0f examples/s" % (
        metrics["wall_seconds"], metrics["final_accuracy"], reached,
        metrics["examples_per_second"]), flush=True)
