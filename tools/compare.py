"""Synchronous or asynchronous? Run every algorithm on the same budget and measure the answer.

One command trains every algorithm of the collection on the same model, data, seed, batch size
and budget, each as a real local cluster (one ps and the workers on free localhost ports, every
task in this machine's own network; tools/launch.py's LocalCluster, always stopped, so that no
process outlives its run), and writes into an output folder (default `comparison/`):

    comparison.md     the tables, a "what we found" paragraph generated from the numbers, plots
    comparison.csv    the same table, one row per configuration, plain numbers
    raw.json          the machine, the settings and every run's RESULT lines with their curves
    accuracy_vs_time.png, scaling.png, straggler.png

    python tools/compare.py --quick                 # a few minutes on 2 cores
    python tools/compare.py                         # every algorithm, workers 1,2,4, 3 repeats
    python tools/compare.py --only Hogwild,Synchronous-SGD --workers 1,2,4 --repeats 5
    python tools/compare.py --replot comparison     # tables, plots, findings again from raw.json
    python tools/compare.py --plan                  # what would run, and each --train_steps

The budget. --train_steps is the global step at which a script stops, but global steps count
different things: in the asynchronous family one global step is one worker minibatch; in
Synchronous-SGD (and its different-learning-rates variant) one aggregated update of N
minibatches; in SAGN one round of N workers × T local steps. The comparison therefore fixes the
budget in minibatch gradients applied to θ (--budget; examples = budget × --batch_size) and
gives each script --train_steps = budget / (minibatches per global step), rounded up. A script
stops at its first global step ≥ --train_steps, so asynchronous and windowed ones may go over
by a few minibatches (up to a window per worker): the Global updates column shows it. With
backup workers (M workers, N < M aggregated) the M − N late gradients of each step are computed
and dropped: they count in the examples/s column (work done), not in the budget (work used).
Every algorithm runs at its own default learning rate (the one its script was tuned with).

The sections.
- scaling: every algorithm at each worker count of --workers (default 1, 2, 4 as the cores
  allow), plus the one-process baseline Non-Distributed_Setup.py, whose time to the target is
  the reference of the speed-up column.
- straggler: every algorithm with 3 workers, once as it is and once with the last worker slowed
  by --straggler_delay seconds after each step (its own --step_delay, through LocalCluster's
  task_args), and Synchronous-SGD with one backup worker (3 workers, --replicas_to_aggregate 2)
  beside Synchronous-SGD with all 3 aggregated.

How each number is computed from raw.json (the test recomputes them the same way):
- launch: the time just before the cluster's first process started. Every timestamp of a curve
  is a real test-set evaluation during training ([unix time, global step, test accuracy]).
- time to target: the earliest curve point of any worker with accuracy ≥ --target, minus launch.
- final test accuracy: that of the worker whose final global_step is largest (it has seen the
  most updates; ties: the lowest task index).
- examples/s: Σ over workers of local_steps / wall_seconds, × batch size (work done together).
- global updates: the largest final global_step of the run's workers.
- wall s: launch to the end of the cluster's last process.
- over repeats: the mean of the runs that succeeded; the spread is their sample standard
  deviation (0 with one run); the time to target is the mean over the runs that reached it,
  beside how many did. Speed-up: the baseline's mean time to target / the row's.
"""
import argparse
import csv
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch import RESULT_PATTERN, LocalCluster  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUTPUT = os.path.join(ROOT, "comparison")
RAW_FILE, MARKDOWN_FILE, CSV_FILE = "raw.json", "comparison.md", "comparison.csv"
ACCURACY_PLOT, SCALING_PLOT, STRAGGLER_PLOT = ("accuracy_vs_time.png", "scaling.png",
                                               "straggler.png")
BASELINE = "Non-Distributed_Setup"
STRAGGLER_WORKERS = 3  # the straggler section's cluster: 2 normal workers and 1 slow one
BACKUP_ALGORITHM = "Synchronous-SGD"  # shown with and without one backup worker
QUICK_ALGORITHMS = ["Hogwild", "Synchronous-SGD", "AGN"]

# Both modes' defaults; any flag given on the command line wins.
FULL = {"budget": 3000, "repeats": 3, "workers": None, "straggler_delay": 0.05,
        "run_timeout": 900.0, "algorithms": None}
QUICK = {"budget": 600, "repeats": 1, "workers": [1, 2], "straggler_delay": 0.05,
         "run_timeout": 300.0, "algorithms": QUICK_ALGORITHMS}

# The table's columns: (CSV name, Markdown heading). The Markdown shows the accuracy's mean and
# spread in one cell, the CSV in two columns.
COLUMNS = [("section", "Section"), ("algorithm", "Algorithm"), ("family", "Family"),
           ("workers", "Workers"), ("aggregated", "Aggregated N"),
           ("straggler_delay", "Straggler s/step"), ("runs_ok", "Runs ok"),
           ("train_steps", "--train_steps"),
           ("final_accuracy_mean", "Final test accuracy"), ("final_accuracy_spread", None),
           ("time_to_target", "Time to target s"), ("reached", "Reached target"),
           ("examples_per_second", "Examples/s"), ("global_updates", "Global updates"),
           ("wall_seconds", "Wall s"), ("speedup", "Speed-up vs baseline")]


# ---------------------------------------------------------------------------------------------
# The collection: each algorithm's script, family, and what one of its global steps consumes.
# ---------------------------------------------------------------------------------------------
class Algorithm:
    """One example script. `per_step(N)`: minibatch gradients one global step applies, when N
    workers' contributions are aggregated (async: 1; SSGD: N; SAGN: N × T)."""

    def __init__(self, name, script, family, per_step=lambda aggregated: 1, extra_args=None):
        self.name, self.script, self.family = name, script, family
        self.per_step = per_step
        self.extra_args = extra_args or (lambda workers: [])

    @property
    def synchronous(self):
        return self.family == "synchronous"

    def exists(self):
        return os.path.isfile(os.path.join(ROOT, self.script))


SAGN_WINDOW = 4
SPREAD_RATES_BASE = 0.1  # Synchronous-SGD-different-learning-rates' default η


def spread_learning_rates(workers):
    """Worker i's rate, evenly from 0.5·η to 1.5·η (their mean is η); one worker: η."""
    if workers == 1:
        return []
    rates = [SPREAD_RATES_BASE * (0.5 + index / (workers - 1)) for index in range(workers)]
    return ["--learning_rates", ",".join("%g" % round(rate, 6) for rate in rates)]


ALGORITHMS = [
    Algorithm(BASELINE, "Non-Distributed_Setup.py", "baseline"),
    Algorithm("Distributed-Setup", "Distributed-Setup/dist_setup.py", "asynchronous"),
    Algorithm("Synchronous-SGD", "Synchronous-SGD/ssgd.py", "synchronous",
              per_step=lambda aggregated: aggregated),
    Algorithm("Synchronous-SGD-different-learning-rates",
              "Synchronous-SGD-different-learning-rates/ssgd.py", "synchronous",
              per_step=lambda aggregated: aggregated, extra_args=spread_learning_rates),
    Algorithm("SAGN", "SAGN/SAGN.py", "synchronous",
              per_step=lambda aggregated: aggregated * SAGN_WINDOW,
              extra_args=lambda workers: ["--window", str(SAGN_WINDOW)]),
    Algorithm("Hogwild", "Hogwild/Hogwild.py", "asynchronous"),
    Algorithm("DOWNPOUR", "DOWNPOUR/DOWNPOUR.py", "asynchronous"),
    Algorithm("DOWNPOUR-Easy", "DOWNPOUR-Easy/DOWNPOUR.py", "asynchronous"),
    Algorithm("AGN", "AGN/AGN.py", "asynchronous"),
    Algorithm("AEASGD", "AEASGD/AEASGD.py", "asynchronous"),
    Algorithm("EAMSGD", "EAMSGD/EAMSGD.py", "asynchronous"),
    Algorithm("DynSGD", "DynSGD/DynSGD.py", "asynchronous"),
    Algorithm("Staleness-Aware-SGD", "Staleness-Aware-SGD/Staleness-Aware-SGD.py",
              "asynchronous"),
]
BY_NAME = {algorithm.name: algorithm for algorithm in ALGORITHMS}
NOT_COMPARED = {"Basics-Tutorial", "Multiple-GPUs-Single-Machine"}  # no new algorithm there


def available_algorithms():
    """The known algorithms whose script is in the checkout (others are being written)."""
    return [algorithm for algorithm in ALGORITHMS if algorithm.exists()]


def unknown_example_folders():
    """Folders with a run.sh that this tool does not know: not compared (their global step's
    meaning, hence their budget, is unknown here), but named so that nobody misses them."""
    known = {os.path.dirname(a.script) for a in ALGORITHMS} | NOT_COMPARED
    return sorted(name for name in os.listdir(ROOT)
                  if os.path.isfile(os.path.join(ROOT, name, "run.sh")) and name not in known)


# ---------------------------------------------------------------------------------------------
# The plan: every configuration to run, each once per repeat.
# ---------------------------------------------------------------------------------------------
def make_config(algorithm, workers, settings, aggregated=None, straggler_delay=0.0):
    """One configuration: the exact script, cluster and flags; the same budget as every other."""
    if algorithm.synchronous:
        aggregated = aggregated or workers
    else:
        aggregated = None
    per_step = algorithm.per_step(aggregated or 1)
    train_steps = int(math.ceil(settings["budget"] / float(per_step)))
    args = ["--train_steps", str(train_steps), "--batch_size", str(settings["batch_size"]),
            "--seed", str(settings["seed"]), "--log_every", str(settings["log_every"])]
    if algorithm.synchronous:
        args += ["--replicas_to_aggregate", str(aggregated)]
    args += algorithm.extra_args(workers)
    straggler_task = "worker%d" % (workers - 1) if straggler_delay else None
    key = "%s|workers=%d|N=%s|delay=%g" % (algorithm.name, workers, aggregated or "-",
                                           straggler_delay)
    return {"key": key, "algorithm": algorithm.name, "family": algorithm.family,
            "script": algorithm.script, "workers": workers, "aggregated": aggregated,
            "minibatches_per_global_step": per_step, "train_steps": train_steps,
            "straggler_delay": straggler_delay, "straggler_task": straggler_task,
            "args": args, "sections": []}


def build_plan(algorithms, settings):
    """The configurations of both sections, each once (a 3-worker run without a straggler is
    both a scaling row, when 3 is among --workers, and the straggler section's reference)."""
    configs = {}

    def add(section, config):
        config = configs.setdefault(config["key"], config)
        if section not in config["sections"]:
            config["sections"].append(section)

    distributed = [a for a in algorithms if a.family != "baseline"]
    add("scaling", make_config(BY_NAME[BASELINE], 1, settings))
    for algorithm in distributed:
        for workers in settings["workers"]:
            add("scaling", make_config(algorithm, workers, settings))
    if settings["straggler"]:
        chosen = settings.get("straggler_algorithms")
        for algorithm in (a for a in distributed if not chosen or a.name in chosen):
            variants = [None]
            if algorithm.name == BACKUP_ALGORITHM:
                variants.append(STRAGGLER_WORKERS - 1)  # one backup worker
            for aggregated in variants:
                for delay in (0.0, settings["straggler_delay"]):
                    add("straggler", make_config(algorithm, STRAGGLER_WORKERS, settings,
                                                 aggregated, delay))
    return list(configs.values())


# ---------------------------------------------------------------------------------------------
# Running: one configuration as a LocalCluster, always stopped, its RESULT lines kept.
# ---------------------------------------------------------------------------------------------
def run_config(config, settings, repeat, echo=False):
    """Run one configuration to the end (or its timeout); returns the raw record."""
    script = os.path.join(ROOT, config["script"])
    baseline = config["family"] == "baseline"
    task_args = ({config["straggler_task"]: ["--step_delay", "%g" % config["straggler_delay"]]}
                 if config["straggler_task"] else None)
    cluster = LocalCluster(script, workers=config["workers"], ps=0 if baseline else 1,
                           args=config["args"], python=settings["python"], echo=echo,
                           task_args=task_args)
    record = {"key": config["key"], "repeat": repeat, "launched": time.time()}
    try:
        if baseline:  # one process, no cluster flags: started as the cluster's only task
            worker = cluster.task("worker0")
            cluster.start_task(worker, [cluster.python, script] + config["args"])
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
    if failed:
        record["error"] = "%s failed (exit code %s); the other tasks were stopped" % (
            ", ".join(failed), ", ".join(str(code) for code in failed.values()))
    elif not ended:
        record["error"] = ("not finished after %g s (--run_timeout); every task was stopped"
                           % settings["run_timeout"])
    elif len(record["results"]) != config["workers"]:
        record["error"] = "%d RESULT line(s) from %d worker(s)" % (len(record["results"]),
                                                                  config["workers"])
    record["ok"] = "error" not in record
    if not record["ok"]:
        record["output_tail"] = "\n".join(
            "[%s] %s" % (task.name, line) for task in cluster.tasks for line in task.lines[-15:])
    return record


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
    """Cores, platform, and the Python and TensorFlow versions of the interpreter that runs the
    examples (asked in a child process, from the installed packages' metadata: its TensorFlow
    may differ from, or not be importable in, this interpreter)."""
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
    """Write raw.json atomically (after every run, so that an interrupted comparison keeps
    what it measured)."""
    path = os.path.join(output, RAW_FILE)
    with open(path + ".tmp", "w") as out:
        json.dump(raw, out, indent=1)
    os.replace(path + ".tmp", path)


def clock(seconds):
    seconds = int(round(seconds))
    return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60) \
        if seconds >= 3600 else "%d:%02d" % (seconds // 60, seconds % 60)


def describe_config(config):
    text = "%s, %d worker%s" % (config["algorithm"], config["workers"],
                                "" if config["workers"] == 1 else "s")
    if config["aggregated"] and config["aggregated"] < config["workers"]:
        text += ", N=%d aggregated (backup workers)" % config["aggregated"]
    if config["straggler_task"]:
        text += ", %s +%g s/step" % (config["straggler_task"], config["straggler_delay"])
    return text


def run_all(raw, output, echo=False):
    """Every configuration once per repeat (repeats interleaved, so that a machine that gets
    busier later does not favour one algorithm), with progress and an ETA."""
    plan, settings = raw["plan"], raw["settings"]
    queue = [(repeat, config) for repeat in range(settings["repeats"]) for config in plan]
    started = time.time()
    for number, (repeat, config) in enumerate(queue, 1):
        done = number - 1
        eta = ("ETA %s" % clock((time.time() - started) / done * (len(queue) - done))
               if done else "ETA after the first run")
        print("[compare] run %d/%d (%d left after it): %s, repeat %d/%d; elapsed %s, %s"
              % (number, len(queue), len(queue) - number, describe_config(config), repeat + 1,
                 settings["repeats"], clock(time.time() - started), eta), flush=True)
        record = run_config(config, settings, repeat, echo)
        raw["runs"].append(record)
        save_raw(raw, output)
        metrics = run_metrics(record, settings["target"], settings["batch_size"])
        if record["ok"]:
            print("[compare]   done in %.1f s: final test accuracy %.4f, %s, %.0f examples/s"
                  % (metrics["wall_seconds"], metrics["final_accuracy"],
                     "%.2f reached %.1f s after launch" % (settings["target"],
                                                           metrics["time_to_target"])
                     if metrics["time_to_target"] is not None
                     else "%.2f not reached" % settings["target"],
                     metrics["examples_per_second"]), flush=True)
        else:
            print("[compare]   FAILED: %s\n%s" % (record["error"], record["output_tail"]),
                  file=sys.stderr, flush=True)
    return time.time() - started


# ---------------------------------------------------------------------------------------------
# Numbers: per run, then per configuration over its repeats.
# ---------------------------------------------------------------------------------------------
def run_metrics(record, target, batch_size):
    """One run's numbers, from its RESULT lines and curves only."""
    results = record["results"]
    if not results:
        return {"final_accuracy": None, "time_to_target": None, "examples_per_second": None,
                "global_updates": None, "wall_seconds": None, "first_evaluation": None}
    most_updates = max(results, key=lambda r: (r["global_step"], -r["task_index"]))
    reached = [point[0] for r in results for point in r["curve"] if point[2] >= target]
    metrics = {
        "final_accuracy": most_updates["test_accuracy"],
        "time_to_target": min(reached) - record["launched"] if reached else None,
        "examples_per_second": batch_size * sum(r["local_steps"] / r["wall_seconds"]
                                                for r in results if r["wall_seconds"] > 0),
        "global_updates": max(r["global_step"] for r in results),
        "wall_seconds": record.get("ended", record["launched"]) - record["launched"],
        "first_evaluation": min((point[0] for r in results for point in r["curve"]),
                                default=None)}
    if metrics["first_evaluation"] is not None:
        metrics["first_evaluation"] -= record["launched"]
    return metrics


def mean(values):
    return statistics.mean(values) if values else None


def spread(values):
    return statistics.stdev(values) if len(values) >= 2 else 0.0 if values else None


def summarize(raw, target):
    """One row per (section, configuration): the means over the runs that succeeded."""
    batch_size = raw["settings"]["batch_size"]
    runs_by_key = {}
    for record in raw["runs"]:
        runs_by_key.setdefault(record["key"], []).append(record)
    rows = []
    for config in raw["plan"]:
        records = runs_by_key.get(config["key"], [])
        good = [run_metrics(r, target, batch_size) for r in records if r["ok"]]
        times = [m["time_to_target"] for m in good if m["time_to_target"] is not None]
        accuracies = [m["final_accuracy"] for m in good]
        row = {"key": config["key"], "algorithm": config["algorithm"],
               "family": config["family"], "workers": config["workers"],
               "aggregated": config["aggregated"], "straggler_delay": config["straggler_delay"],
               "runs": len(records), "runs_ok": len(good), "train_steps": config["train_steps"],
               "final_accuracy_mean": mean(accuracies), "final_accuracy_spread": spread(accuracies),
               "time_to_target": mean(times), "reached": len(times),
               "examples_per_second": mean([m["examples_per_second"] for m in good]),
               "global_updates": mean([m["global_updates"] for m in good]),
               "wall_seconds": mean([m["wall_seconds"] for m in good]),
               "first_evaluation": mean([m["first_evaluation"] for m in good
                                         if m["first_evaluation"] is not None])}
        for section in config["sections"]:
            rows.append(dict(row, section=section))
    baseline = next((row for row in rows if row["family"] == "baseline"), None)
    for row in rows:
        row["speedup"] = (baseline["time_to_target"] / row["time_to_target"]
                          if baseline and baseline["time_to_target"] and row["time_to_target"]
                          else None)
    return rows


# ---------------------------------------------------------------------------------------------
# Tables: Markdown for people, CSV for programs (the same rows).
# ---------------------------------------------------------------------------------------------
def fmt(value, digits=1):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.*f" % (digits, value)
    return str(value)


def markdown_cells(row):
    """The Markdown cells of one row, in COLUMNS order (the spread joins the accuracy's cell)."""
    accuracy = ("-" if row["final_accuracy_mean"] is None else "%.4f ± %.4f" % (
        row["final_accuracy_mean"], row["final_accuracy_spread"]))
    return [row["section"], row["algorithm"], row["family"], str(row["workers"]),
            fmt(row["aggregated"]), fmt(row["straggler_delay"], 3),
            "%d/%d" % (row["runs_ok"], row["runs"]), str(row["train_steps"]), accuracy,
            fmt(row["time_to_target"], 2), "%d/%d" % (row["reached"], row["runs_ok"]),
            fmt(row["examples_per_second"], 1), fmt(row["global_updates"], 1),
            fmt(row["wall_seconds"], 2), fmt(row["speedup"], 3)]


def markdown_table(rows):
    headings = [heading for _, heading in COLUMNS if heading]
    lines = ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
    lines += ["| " + " | ".join(markdown_cells(row)) + " |" for row in rows]
    return "\n".join(lines)


def write_csv(rows, path):
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow([name for name, _ in COLUMNS])
        for row in rows:
            writer.writerow(["" if row[name] is None else
                             repr(row[name]) if isinstance(row[name], float) else row[name]
                             for name, _ in COLUMNS])


def straggler_costs(rows):
    """For each configuration of the straggler section: its numbers without and with the slow
    worker, and the cost (time to target with / without; wall time when a run missed it)."""
    section = [row for row in rows if row["section"] == "straggler"]
    pairs = []
    for slow in (row for row in section if row["straggler_delay"]):
        normal = next((row for row in section if not row["straggler_delay"]
                       and row["algorithm"] == slow["algorithm"]
                       and row["aggregated"] == slow["aggregated"]), None)
        if normal is None:
            continue
        measure, before, after = comparable(normal, slow)
        pairs.append({"label": label(slow), "family": slow["family"], "normal": normal,
                      "slow": slow, "measure": measure, "before": before, "after": after,
                      "cost": after / before if before and after else None})
    return pairs


def comparable(first, second):
    """The measure two rows can be compared on: time to target if both reached it, else the
    wall time to finish the budget."""
    if first["time_to_target"] is not None and second["time_to_target"] is not None:
        return "time to target", first["time_to_target"], second["time_to_target"]
    return "time to finish the budget", first["wall_seconds"], second["wall_seconds"]


def label(row):
    text = row["algorithm"]
    if row["aggregated"] and row["aggregated"] < row["workers"]:
        text += " (N=%d of %d)" % (row["aggregated"], row["workers"])
    return text


def straggler_table(pairs, delay):
    lines = ["| Configuration | Family | Measure | Without straggler s | With straggler "
             "(+%g s/step) s | Cost (with / without) |" % delay, "|---|---|---|---|---|---|"]
    lines += ["| %s | %s | %s | %s | %s | %s |" % (
        pair["label"], pair["family"], pair["measure"], fmt(pair["before"], 2),
        fmt(pair["after"], 2), "-" if pair["cost"] is None else "%.2f×" % pair["cost"])
        for pair in pairs]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# What we found: sentences chosen by conditions on the numbers.
# ---------------------------------------------------------------------------------------------
def findings(rows, settings):
    """The paragraph of the report, generated from the rows (nothing in it is typed by hand)."""
    target = settings["target"]
    scaling = [row for row in rows if row["section"] == "scaling" and row["runs_ok"]]
    distributed = [row for row in scaling if row["family"] != "baseline"]
    baseline = next((row for row in scaling if row["family"] == "baseline"), None)
    if not scaling:
        return ("No run of the comparison finished successfully, so there is nothing to "
                "conclude yet (see the failed runs below, or run it).")
    sentences = []

    # Who reached the target first.
    reached = [row for row in scaling if row["time_to_target"] is not None]
    if reached:
        first = min(reached, key=lambda row: row["time_to_target"])
        runner_up = min((row for row in reached if row["family"] != "baseline"),
                        key=lambda row: row["time_to_target"], default=None)
        if first["family"] == "baseline":
            after = ("; the fastest distributed run, %s with %d worker(s), took %.1f s" % (
                label(runner_up), runner_up["workers"], runner_up["time_to_target"])
                if runner_up else "; no distributed run reached it")
            sentences.append("The one-process baseline reached %.2f test accuracy first, %.1f s "
                             "after launch%s." % (target, first["time_to_target"], after))
        else:
            sentences.append("%s with %d worker(s) reached %.2f test accuracy first, %.1f s "
                             "after launch%s." % (label(first), first["workers"], target,
                                                  first["time_to_target"],
                                                  baseline_clause(baseline)))
    else:
        sentences.append("No configuration reached %.2f test accuracy within the budget of %d "
                         "minibatches; raise --budget or lower --target for a time-to-accuracy "
                         "comparison (the other columns stand)." % (target, settings["budget"]))
    faster = [row for row in distributed if row["speedup"] and row["speedup"] > 1]
    with_speedup = [row for row in distributed if row["speedup"]]
    if baseline and baseline["time_to_target"] and with_speedup and not faster:
        best = max(with_speedup, key=lambda row: row["speedup"])
        sentences.append(
            "No distributed configuration beat the single process here (the best, %s with %d "
            "worker(s), took %.2f× its time)%s." % (
                label(best), best["workers"], 1 / best["speedup"],
                ": the ps and the workers share %d core(s), so a cluster adds communication "
                "and its extra workers add no compute" % settings["machine"]["cores"]
                if settings["machine"]["cores"] < max(row["workers"] for row in distributed) + 1
                else ""))
    elif faster:
        best = max(faster, key=lambda row: row["speedup"])
        sentences.append("%d of %d distributed configurations beat the single process; the "
                         "best, %s with %d worker(s), by %.2f×." % (
                             len(faster), len(distributed), label(best), best["workers"],
                             best["speedup"]))

    # Start-up: TensorFlow's import and the cluster's handshake count in every time above.
    starts = [row for row in distributed if row["first_evaluation"] and row["wall_seconds"]]
    if starts:
        share = mean([row["first_evaluation"] / row["wall_seconds"] for row in starts])
        if share > 0.5:
            sentences.append(
                "Start-up dominated this budget: the first test evaluation came on average "
                "%.0f%% of the way through a distributed run's wall time (TensorFlow's import "
                "and the cluster's start), so a larger --budget tells more about training "
                "itself." % (100 * share))

    # A busy machine: other work in the measured times.
    loads = [r["load_average"] for r in settings.get("run_records", []) if "load_average" in r]
    if loads and mean(loads) > settings["machine"]["cores"]:
        sentences.append(
            "Other work shared the machine (load average %.1f on %d core(s) at the end of the "
            "runs, on average), so every time here carries that noise: compare the rows with "
            "one another, not with another machine." % (mean(loads),
                                                        settings["machine"]["cores"]))

    # Stability across repeats.
    repeated = [row for row in distributed if row["runs_ok"] >= 2]
    if repeated:
        steady = min(repeated, key=lambda row: row["final_accuracy_spread"])
        shaky = max(repeated, key=lambda row: row["final_accuracy_spread"])
        sentences.append("Across %d repeats the most stable final accuracy was %s's with %d "
                         "worker(s) (± %.4f), the least stable %s's with %d (± %.4f)." % (
                             settings["repeats"], label(steady), steady["workers"],
                             steady["final_accuracy_spread"], label(shaky), shaky["workers"],
                             shaky["final_accuracy_spread"]))
    elif settings["repeats"] < 2:
        sentences.append("With one repeat per configuration, stability across repeats was not "
                         "measured (use --repeats 3 or more).")
    else:
        sentences.append("No configuration had two successful runs, so stability across "
                         "repeats was not measured.")

    # The straggler.
    pairs = [pair for pair in straggler_costs(rows) if pair["cost"]]
    if pairs:
        sentences.append("One worker slowed by %g s per step changed the time of %s%s." % (
            settings["straggler_delay"], "; ".join(
                "%s ×%.2f (%s)" % (pair["label"], pair["cost"], pair["measure"])
                for pair in pairs),
            " (a ratio below 1 is noise: a slower worker cannot make a run faster)"
            if any(pair["cost"] < 1 for pair in pairs) else ""))
        ranked = ranked_by_speed([pair["slow"] for pair in pairs])
        sentences.append("With the straggler, %s was fastest (%s) and %s slowest (%s)." % (
            label(ranked[0]), how_fast(ranked[0]), label(ranked[-1]), how_fast(ranked[-1])))

    sentences += literature_checks(rows, settings, distributed, pairs)
    return " ".join(sentences)


def baseline_clause(baseline):
    if not baseline:
        return ""
    if baseline["time_to_target"] is None:
        return " (the one-process baseline did not reach it)"
    return " (the one-process baseline: %.1f s)" % baseline["time_to_target"]


def ranked_by_speed(rows):
    """Rows fastest first: those that reached the target by their time to it, then the others
    by their time to finish the budget."""
    return sorted(rows, key=lambda row: (row["time_to_target"] is None,
                                         row["time_to_target"] or row["wall_seconds"]))


def how_fast(row):
    if row["time_to_target"] is not None:
        return "%.1f s to reach the target" % row["time_to_target"]
    return "did not reach the target; %.1f s to finish the budget" % row["wall_seconds"]


def race(first, second):
    """(whether first did better than second, how to say it): the sooner to the target; if only
    one reached it, that one; if neither did, the sooner to finish the budget."""
    a, b = first["time_to_target"], second["time_to_target"]
    if a is not None and b is not None:
        return a < b, "%.1f s against %.1f s to reach the target" % (a, b)
    if a is not None or b is not None:
        return a is not None, "only %s reached the target within the budget" % label(
            first if a is not None else second)
    return (first["wall_seconds"] < second["wall_seconds"],
            "%.1f s against %.1f s to finish the budget; neither reached the target"
            % (first["wall_seconds"], second["wall_seconds"]))


def best_of(rows, family, workers):
    """The family's fastest row at this worker count, and the measure it is fastest on."""
    candidates = [row for row in rows if row["family"] == family and row["workers"] == workers
                  and not (row["aggregated"] and row["aggregated"] < row["workers"])]
    reached = [row for row in candidates if row["time_to_target"] is not None]
    if reached:
        return min(reached, key=lambda row: row["time_to_target"])
    return min(candidates, key=lambda row: row["wall_seconds"]) if candidates else None


def literature_checks(rows, settings, distributed, pairs):
    """Where this machine agrees with the folklore and the papers, and where it contradicts
    them, said plainly."""
    sentences = []
    counts = sorted({row["workers"] for row in distributed})

    # Jin et al. 2016: asynchronous methods win at small scale (the fewest workers, 2 or more,
    # that were measured) ...
    small = min((count for count in counts if count >= 2), default=None)
    if small is not None:
        sync, async_ = (best_of(distributed, "synchronous", small),
                        best_of(distributed, "asynchronous", small))
        if sync and async_:
            async_won, how = race(async_, sync)
            sentences.append(
                "At %d worker(s) the best asynchronous run, %s, %s the best synchronous one, "
                "%s (%s): this %s Jin et al. 2016 (\"How to scale distributed deep "
                "learning?\"), where asynchronous methods win at small scale." % (
                    small, label(async_), "beat" if async_won else "lost to", label(sync), how,
                    "agrees with" if async_won else "contradicts"))
    # ... and synchronous ones scale further.
    if len(counts) >= 2:
        low, high = counts[0], counts[-1]
        gains = {}
        for family in ("synchronous", "asynchronous"):
            throughput = {count: max((row["examples_per_second"] for row in distributed
                                      if row["family"] == family and row["workers"] == count
                                      and row["examples_per_second"]), default=None)
                          for count in (low, high)}
            if throughput[low] and throughput[high]:
                gains[family] = throughput[high] / throughput[low]
        if len(gains) == 2:
            agrees = gains["synchronous"] > gains["asynchronous"]
            sentences.append(
                "From %d to %d workers the best synchronous throughput grew ×%.2f, the best "
                "asynchronous ×%.2f: this %s the claim that synchronous training scales "
                "further%s." % (
                    low, high, gains["synchronous"], gains["asynchronous"],
                    "agrees with" if agrees else "contradicts",
                    "" if max(gains.values()) > 1 else
                    " (neither grew: the workers compete for the same cores)"))
    else:
        sentences.append("Only one worker count was measured, so how each family scales was "
                         "not tested (use --workers 1,2,4).")

    # Chen et al. 2016: backup workers beat a straggler.
    by_label = {pair["label"]: pair for pair in pairs}
    backup_label = "%s (N=%d of %d)" % (BACKUP_ALGORITHM, STRAGGLER_WORKERS - 1,
                                        STRAGGLER_WORKERS)
    backup, full = by_label.get(backup_label), by_label.get(BACKUP_ALGORITHM)
    if backup and full:
        backup_won, how = race(backup["slow"], full["slow"])
        sentences.append(
            "With the straggler, %s with one backup worker %s the one with all %d aggregated "
            "(%s): this %s Chen et al. 2016 (\"Revisiting Distributed Synchronous SGD\"), "
            "where backup workers hide stragglers." % (
                BACKUP_ALGORITHM, "beat" if backup_won else "lost to", STRAGGLER_WORKERS, how,
                "agrees with" if backup_won else "contradicts"))
    # Folklore: asynchronous training shrugs a straggler off, synchronous training waits.
    async_costs = [pair for pair in pairs if pair["family"] == "asynchronous"]
    if full and async_costs:
        mildest = min(async_costs, key=lambda pair: pair["cost"])
        sentences.append(
            "The straggler multiplied the time of Synchronous-SGD without a backup by %.2f and "
            "that of the least affected asynchronous algorithm, %s, by %.2f: this %s the "
            "folklore that asynchronous training does not wait for slow workers." % (
                full["cost"], mildest["label"], mildest["cost"],
                "agrees with" if mildest["cost"] < full["cost"] else "contradicts"))
    return sentences


# ---------------------------------------------------------------------------------------------
# Plots (matplotlib, Agg backend: no display needed).
# ---------------------------------------------------------------------------------------------
def run_curve(record):
    """All workers' evaluations of one run, in time order: (seconds after launch, accuracy)."""
    points = sorted((point[0] - record["launched"], point[2])
                    for result in record["results"] for point in result["curve"])
    return [p[0] for p in points], [p[1] for p in points]


def colours(names):
    """One colour per configuration label; the baseline black."""
    import matplotlib.pyplot as plt
    others = sorted(name for name in names if name != BASELINE)
    cycle = plt.get_cmap("tab10" if len(others) <= 10 else "tab20").colors
    colour_of = {name: cycle[index % len(cycle)] for index, name in enumerate(others)}
    colour_of[BASELINE] = "black"
    return colour_of


def plot_accuracy(ax, raw, configs, colour_of, target):
    runs = [r for r in raw["runs"] if r["ok"]]
    for config in configs:
        name = label(config)
        for index, record in enumerate(r for r in runs if r["key"] == config["key"]):
            x, y = run_curve(record)
            ax.plot(x, y, color=colour_of[name], alpha=0.9 if index == 0 else 0.35,
                    linestyle="--" if config["family"] == "synchronous" else "-",
                    linewidth=1.2, label=name if index == 0 else None)
    ax.axhline(target, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("seconds after launch")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(max(0.0, target - 0.35), 1.0)
    ax.grid(alpha=0.3)


def legend(ax):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def make_plots(raw, rows, output):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    settings, target = raw["settings"], raw["settings"]["target"]
    names = {label(config) for config in raw["plan"]}
    colour_of = colours(names)
    written = []

    # 1. Accuracy against wall-clock time, one panel per worker count.
    scaling = [c for c in raw["plan"] if "scaling" in c["sections"]]
    counts = sorted({c["workers"] for c in scaling if c["family"] != "baseline"}) or [1]
    figure, axes = plt.subplots(1, len(counts), figsize=(6 * len(counts), 4.5), squeeze=False)
    for ax, workers in zip(axes[0], counts):
        plot_accuracy(ax, raw, [c for c in scaling if c["workers"] == workers
                                or c["family"] == "baseline"], colour_of, target)
        ax.set_title("%d worker(s) (baseline: one process)" % workers)
    legend(axes[0][0])
    figure.suptitle("Test accuracy during training; budget %d minibatches × %d examples"
                    % (settings["budget"], settings["batch_size"]))
    figure.tight_layout()
    figure.savefig(os.path.join(output, ACCURACY_PLOT), dpi=100)
    plt.close(figure)
    written.append(ACCURACY_PLOT)

    # 2. Throughput and time to target against the number of workers.
    figure, (throughput, time_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    section = [row for row in rows if row["section"] == "scaling"]
    for name in sorted({row["algorithm"] for row in section if row["family"] != "baseline"}):
        line = sorted((row for row in section if row["algorithm"] == name),
                      key=lambda row: row["workers"])
        style = "--" if line[0]["family"] == "synchronous" else "-"
        for ax, key in ((throughput, "examples_per_second"), (time_ax, "time_to_target")):
            points = [(row["workers"], row[key]) for row in line if row[key] is not None]
            if points:
                ax.plot(*zip(*points), style, marker="o", color=colour_of[name], label=name)
    baseline = next((row for row in section if row["family"] == "baseline"), None)
    for ax, key in ((throughput, "examples_per_second"), (time_ax, "time_to_target")):
        if baseline and baseline[key] is not None:
            ax.axhline(baseline[key], color="black", linestyle=":", label="one process")
        ax.set_xlabel("workers")
        ax.set_xticks(counts)
        ax.grid(alpha=0.3)
    throughput.set_ylabel("examples/s, all workers together")
    time_ax.set_ylabel("seconds from launch to %.2f test accuracy" % target)
    legend(throughput)
    figure.suptitle("Scaling (dashed: synchronous family)")
    figure.tight_layout()
    figure.savefig(os.path.join(output, SCALING_PLOT), dpi=100)
    plt.close(figure)
    written.append(SCALING_PLOT)

    # 3. The straggler: accuracy over time with it, and each configuration without / with it.
    pairs = straggler_costs(rows)
    if pairs:
        figure, (curves, bars) = plt.subplots(1, 2, figsize=(13, 4.5))
        slow_configs = [c for c in raw["plan"] if c["straggler_task"]]
        plot_accuracy(curves, raw, slow_configs, colour_of, target)
        curves.set_title("%d workers, %s slowed by %g s per step" % (
            STRAGGLER_WORKERS, slow_configs[0]["straggler_task"], settings["straggler_delay"]))
        legend(curves)
        positions = range(len(pairs))
        width = 0.38
        bars.bar([p - width / 2 for p in positions],
                 [pair["before"] or 0 for pair in pairs], width, label="without straggler")
        bars.bar([p + width / 2 for p in positions],
                 [pair["after"] or 0 for pair in pairs], width, label="with straggler")
        bars.set_xticks(list(positions))
        bars.set_xticklabels(["%s\n(%s)" % (pair["label"], pair["measure"]) for pair in pairs],
                             rotation=30, ha="right", fontsize=7)
        bars.set_ylabel("seconds")
        bars.set_title("What the straggler cost")
        bars.legend(fontsize=7)
        bars.grid(alpha=0.3, axis="y")
        figure.tight_layout()
        figure.savefig(os.path.join(output, STRAGGLER_PLOT), dpi=100)
        plt.close(figure)
        written.append(STRAGGLER_PLOT)
    return written


# ---------------------------------------------------------------------------------------------
# The report: everything derived from raw.json, so --replot redraws it without running.
# ---------------------------------------------------------------------------------------------
def budget_table(raw):
    settings = raw["settings"]
    lines = ["| Configuration | Workers | Minibatches per global step | --train_steps | "
             "Minibatches applied |", "|---|---|---|---|---|"]
    for config in raw["plan"]:
        if config["straggler_task"]:
            continue
        lines.append("| %s | %d | %d | %d | %d |" % (
            label(config), config["workers"], config["minibatches_per_global_step"],
            config["train_steps"], config["train_steps"] * config["minibatches_per_global_step"]))
    return ("Every run gets the same budget: %d minibatch gradients of %d examples (%d examples) "
            "applied to θ. One global step consumes a different number of minibatches per "
            "algorithm, so --train_steps is the budget divided by it, rounded up:\n\n%s"
            % (settings["budget"], settings["batch_size"],
               settings["budget"] * settings["batch_size"], "\n".join(lines)))


def write_report(raw, output):
    """comparison.md, comparison.csv and the plots, from raw.json's content alone."""
    settings, machine = raw["settings"], raw["settings"]["machine"]
    rows = summarize(raw, settings["target"])
    write_csv(rows, os.path.join(output, CSV_FILE))
    plots = make_plots(raw, rows, output)
    found = findings(rows, dict(settings, run_records=raw["runs"]))
    pairs = straggler_costs(rows)
    scaling = [row for row in rows if row["section"] == "scaling"]
    straggling = [row for row in rows if row["section"] == "straggler"]
    failed = [r for r in raw["runs"] if not r["ok"]]
    parts = [
        "# Synchronous or asynchronous? Measured on this machine",
        "Machine: %d core(s), %s; Python %s, TensorFlow %s, matplotlib %s; load average %s at "
        "the start; %s. Command: `%s`." % (
            machine["cores"], machine["platform"], machine["python"], machine["tensorflow"],
            machine["matplotlib"], " ".join("%.2f" % l for l in machine["load_average_at_start"]),
            machine["date"], settings["command"]),
        "## What we found", found,
        "## Without a straggler",
        "Target test accuracy %.2f; %d repeat(s) per configuration, all with seed %d; test "
        "accuracy evaluated every %d local steps of each worker." % (
            settings["target"], settings["repeats"], settings["seed"], settings["log_every"]),
        markdown_table(scaling),
        "![accuracy against time](%s)\n\n![scaling](%s)" % (ACCURACY_PLOT, SCALING_PLOT)]
    if straggling:
        parts += ["## With a straggler",
                  "%d workers; in the slowed runs the last worker sleeps %g s after each step."
                  % (STRAGGLER_WORKERS, settings["straggler_delay"]),
                  markdown_table(straggling), straggler_table(pairs, settings["straggler_delay"])]
        if STRAGGLER_PLOT in plots:
            parts.append("![straggler](%s)" % STRAGGLER_PLOT)
    parts += ["## The budget", budget_table(raw),
              "## How the numbers are computed",
              __doc__.split("How each number is computed from raw.json "
                            "(the test recomputes them the same way):\n")[1].strip()]
    if failed:
        parts += ["## Failed runs", "\n".join("- %s, repeat %d: %s" % (
            r["key"], r["repeat"] + 1, r["error"]) for r in failed)]
    text = "\n\n".join(parts) + "\n"
    with open(os.path.join(output, MARKDOWN_FILE), "w") as out:
        out.write(text)
    return rows, found


# ---------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------
def parse_list(text, kind=str):
    return [kind(item.strip()) for item in text.split(",") if item.strip()]


def default_worker_counts(cores):
    """1, 2, 4 (and 8) workers, as far as the cores allow one core per task (the ps included);
    at least 1 and 2."""
    return [workers for workers in (1, 2, 4, 8) if workers <= 2 or workers + 1 <= cores]


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:3]))
    parser.add_argument("--quick", action="store_true",
                        help="few algorithms (%s), budget %d, 1 repeat, workers 1,2: a few "
                             "minutes on 2 cores" % (",".join(QUICK_ALGORITHMS),
                                                     QUICK["budget"]))
    parser.add_argument("--only", help="comma-separated algorithm folders, e.g. "
                                       "Hogwild,Synchronous-SGD (the baseline always runs)")
    parser.add_argument("--budget", type=int,
                        help="minibatch gradients applied to θ per run (full: %d, quick: %d)"
                             % (FULL["budget"], QUICK["budget"]))
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0, help="the same for every run")
    parser.add_argument("--repeats", type=int, help="runs per configuration (full: 3, quick: 1)")
    parser.add_argument("--workers", help="comma-separated worker counts (full: 1,2,4 as the "
                                          "cores allow; quick: 1,2)")
    parser.add_argument("--target", type=float, help="target test accuracy (default 0.95); with "
                                                     "--replot, recomputed from the curves")
    parser.add_argument("--log_every", type=int,
                        help="local steps between two test evaluations (default: budget / 40)")
    parser.add_argument("--straggler_delay", type=float,
                        help="seconds the straggler sleeps after each step (default %g)"
                             % FULL["straggler_delay"])
    parser.add_argument("--no_straggler", action="store_true", help="skip the straggler section")
    parser.add_argument("--straggler_algorithms",
                        help="comma-separated algorithms of the straggler section (default: "
                             "every one compared)")
    parser.add_argument("--run_timeout", type=float, help="seconds one run may take")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter that runs the examples (default: this one)")
    parser.add_argument("--output", help="output folder (default: comparison/)")
    parser.add_argument("--replot", metavar="DIR",
                        help="redraw tables, plots and findings from DIR/raw.json; runs nothing")
    parser.add_argument("--plan", action="store_true",
                        help="print what would run (configurations, --train_steps) and write "
                             "raw.json with the plan and no runs; runs nothing")
    parser.add_argument("--verbose", action="store_true", help="show every task's output")
    options = parser.parse_args(argv)
    for name in ("budget", "batch_size", "repeats", "log_every"):
        value = getattr(options, name)
        if value is not None and value < 1:
            parser.error("--%s must be a positive integer, got %d" % (name, value))
    if options.target is not None and not 0 < options.target <= 1:
        parser.error("--target must be in (0, 1], got %g" % options.target)
    if options.straggler_delay is not None and not options.straggler_delay > 0:
        parser.error("--straggler_delay must be positive, got %g" % options.straggler_delay)
    if options.workers:
        try:
            options.workers = sorted(set(parse_list(options.workers, int)))
        except ValueError:
            parser.error("--workers: '%s' is not a comma-separated list of integers"
                         % options.workers)
        if not options.workers or min(options.workers) < 1:
            parser.error("--workers: every count must be at least 1")
    return parser, options


def check_names(parser, flag, names):
    unknown = [name for name in names if name not in BY_NAME]
    if unknown:
        parser.error("%s: unknown algorithm(s) %s; known: %s" % (
            flag, ", ".join(unknown), ", ".join(a.name for a in ALGORITHMS[1:])))


def settings_from(options, parser, argv):
    """The settings of a new comparison: the mode's defaults, then the flags given."""
    mode = QUICK if options.quick else FULL
    algorithms = available_algorithms()
    wanted = (parse_list(options.only) if options.only else mode["algorithms"])
    if wanted:
        check_names(parser, "--only", wanted)
        algorithms = [a for a in algorithms if a.name in wanted or a.family == "baseline"]
    if options.straggler_algorithms:
        check_names(parser, "--straggler_algorithms", parse_list(options.straggler_algorithms))
    budget = options.budget or mode["budget"]
    return algorithms, {
        "mode": "quick" if options.quick else "full", "budget": budget,
        "batch_size": options.batch_size, "seed": options.seed,
        "repeats": options.repeats or mode["repeats"],
        "workers": options.workers or mode["workers"] or default_worker_counts(os.cpu_count()),
        "target": options.target if options.target is not None else 0.95,
        "log_every": options.log_every or max(1, budget // 40),
        "straggler": not options.no_straggler,
        "straggler_algorithms": (parse_list(options.straggler_algorithms)
                                 if options.straggler_algorithms else None),
        "straggler_delay": options.straggler_delay or mode["straggler_delay"],
        "run_timeout": options.run_timeout or mode["run_timeout"],
        "python": options.python,
        "command": " ".join(["python", "tools/compare.py"] + list(argv))}


def replot(directory, target=None):
    """Tables, plots and findings again from DIR/raw.json (optionally for another target)."""
    with open(os.path.join(directory, RAW_FILE)) as source:
        raw = json.load(source)
    if target is not None:
        raw["settings"]["target"] = target
    rows, found = write_report(raw, directory)
    print(markdown_table([row for row in rows if row["section"] == "scaling"]))
    print("\n" + found)
    print("[compare] redrawn from %s" % os.path.join(directory, RAW_FILE))
    return 0


def main(argv=None):
    parser, options = parse_arguments(argv)
    if options.replot:
        if not os.path.isfile(os.path.join(options.replot, RAW_FILE)):
            parser.error("--replot: no %s in %s" % (RAW_FILE, options.replot))
        return replot(options.replot, options.target)

    algorithms, settings = settings_from(options, parser,
                                         sys.argv[1:] if argv is None else argv)
    output = os.path.abspath(options.output or DEFAULT_OUTPUT)
    os.makedirs(output, exist_ok=True)
    for name in unknown_example_folders():
        print("[compare] note: %s/ has a run.sh but is not in this tool's list; not compared"
              % name, flush=True)
    missing = [a.name for a in ALGORITHMS if not a.exists()]
    if missing:
        print("[compare] note: not in this checkout yet, skipped: %s" % ", ".join(missing))
    settings["machine"] = machine_description(settings["python"])
    plan = build_plan(algorithms, settings)
    raw = {"settings": settings, "plan": plan, "runs": []}
    print("[compare] %s mode: %d configuration(s) × %d repeat(s) = %d runs of %d minibatches "
          "× %d examples each, on %d core(s) (TensorFlow %s); results in %s" % (
              settings["mode"], len(plan), settings["repeats"], len(plan) * settings["repeats"],
              settings["budget"], settings["batch_size"], settings["machine"]["cores"],
              settings["machine"]["tensorflow"], output), flush=True)
    if options.plan:
        for config in plan:
            print("[compare]   %-70s --train_steps %5d  (%s)" % (
                describe_config(config), config["train_steps"], ", ".join(config["sections"])))
        save_raw(raw, output)
        return 0

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    try:
        elapsed = run_all(raw, output, echo=options.verbose)
    except KeyboardInterrupt:
        save_raw(raw, output)
        print("[compare] interrupted: every cluster was stopped; %d finished run(s) kept in %s"
              % (len(raw["runs"]), os.path.join(output, RAW_FILE)), file=sys.stderr)
        return 130
    rows, found = write_report(raw, output)
    print("\n" + markdown_table(rows) + "\n\n" + found)
    print("\n[compare] %d runs in %s; %s, %s, %s and the plots in %s" % (
        len(raw["runs"]), clock(elapsed), MARKDOWN_FILE, CSV_FILE, RAW_FILE, output))
    return 1 if any(not r["ok"] for r in raw["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
