"""Run every example with its defaults and print what each reached, and how fast.

This is the main job of `bash setup.sh`: each example's run.sh (and the one-process baseline) runs
once, start to prompt, and the table shows its wall time, steps per second, test accuracy and
time from launch to the target accuracy, beside the project's speed targets. With --repeats 3
it reports medians; with --readme it rewrites README.md's results and its choosing table's
measured columns from the run.
With --soak SECONDS it instead trains one example (Hogwild unless --only names another) for that
long, counted from its first progress line, and prints every task's resident memory over time,
and how fast it grows once warmed up.
With --peers it runs Hogwild, AGN and Synchronous-SGD beside the programs a user would pick
instead (tools/peers/: TF2's ParameterServerStrategy, PyTorch DDP and shared-memory Hogwild),
interleaved, and prints the figures and the ratios ours/peer beside the targets; Hogwild, AGN
and Synchronous-SGD run twice there, one step per session.run (K = 1, the lesson) and
--steps_per_run 100. With --floor it runs the one-process baseline and Distributed-Setup (one
ps, one worker) with --steps_per_run 1, 10 and 100, interleaved, and prints the step time of
each against the one-process step.

    python tools/benchmark.py [--repeats N] [--only Hogwild,AGN] [--readme]
    python tools/benchmark.py --soak 600 [--only Hogwild]
    python tools/benchmark.py --peers [--repeats 3] [--torch_python P] [--tf2_python P]
                              [--only Hogwild,AGN,torch-hogwild]
    python tools/benchmark.py --floor [--repeats 3]
"""
import argparse
import glob
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch import RESULT_PATTERN, LocalCluster  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT = os.path.join(ROOT, "benchmark-results")  # every run's raw results (not committed)
RECORD = os.path.join(ROOT, "results", "benchmark.json")  # the run the README shows
README = os.path.join(ROOT, "README.md")
BASELINE = "Non-Distributed_Setup.py"
TARGET_ACCURACY = 0.95
# The speed targets (issues 10 and 19), printed beside the measurements. A run.sh's wall is
# judged against the one-process script's wall of the same benchmark run (issue 19), so that a
# slow or busy machine does not decide it.
TARGETS = {"wall_seconds": 8.0, "launch_to_target_seconds": 7.0, "async_aggregate": 520.0,
           "step_time_ratio": 2.0, "wall_ratio": 2.5}
README_START, README_END = "<!-- benchmark:start -->", "<!-- benchmark:end -->"


def entry_points():
    """The baseline, then every example folder's shell entry points (run.sh, run_sup.sh …)."""
    scripts = sorted(glob.glob(os.path.join(ROOT, "*", "*.sh")))
    return [BASELINE] + [os.path.relpath(path, ROOT) for path in scripts
                         if not os.path.relpath(path, ROOT).startswith(("tools", "tests", "."))]


def run_once(entry, extra_args, python, command=None):
    """Run one entry point (or `command`, a peer's) to the end; returns its measurements."""
    if command is not None:
        command = list(command)
    elif entry == BASELINE:
        command = [python, os.path.join(ROOT, BASELINE)]
    else:
        command = ["bash", os.path.join(ROOT, entry)]
    launched = time.time()
    process = subprocess.run(command + extra_args, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=900,
                             env=dict(os.environ, PYTHON=python, PYTHONUNBUFFERED="1"))
    wall = time.time() - launched
    text = process.stdout.decode("utf-8", "replace")
    results = [json.loads(match.group(2)) for match in map(RESULT_PATTERN.match,
                                                           text.splitlines()) if match]
    reached = [time_ for r in results for time_, _, accuracy in r["curve"]
               if accuracy >= TARGET_ACCURACY]
    return {"entry": entry, "exit_code": process.returncode, "wall_seconds": wall,
            "algorithm": results[0]["algorithm"] if results else None,
            # A peer's coordinator reports for all of its workers in one RESULT line.
            "workers": max((r["workers"] for r in results), default=0) if command is not None
            else len(results),
            "global_step": max((r["global_step"] for r in results), default=None),
            "test_accuracy": min((r["test_accuracy"] for r in results), default=None),
            "steps_per_second_per_worker": statistics.mean(
                r["steps_per_second"] for r in results) if results else None,
            "aggregate_steps_per_second": sum(r["steps_per_second"] for r in results),
            "launch_to_target_seconds": min(reached) - launched if reached else None,
            "results": results, "output_tail": text[-3000:] if process.returncode else ""}


def median(runs, key):
    values = [run[key] for run in runs if run[key] is not None]
    return statistics.median(values) if values else None


def summarize(entry, runs):
    summary = {key: median(runs, key) for key in (
        "wall_seconds", "global_step", "test_accuracy", "steps_per_second_per_worker",
        "aggregate_steps_per_second", "launch_to_target_seconds")}
    summary.update(entry=entry, algorithm=runs[0]["algorithm"], workers=runs[0]["workers"],
                   repeats=len(runs), failures=sum(run["exit_code"] != 0 for run in runs))
    return summary


def fmt(value, digits=1):
    if value is None:
        return "-"
    return ("%." + str(digits) + "f") % value if isinstance(value, float) else str(value)


def wall_ratio(summary, summaries):
    """This entry's wall against the one-process script's, in the same benchmark run."""
    baseline = [s["wall_seconds"] for s in summaries if s["entry"] == BASELINE]
    if not baseline or not baseline[0] or summary["wall_seconds"] is None:
        return None
    return summary["wall_seconds"] / baseline[0]


def table(summaries):
    header = ["example", "workers", "test accuracy", "wall s (run.sh)",
              "× the one-process wall", "launch → %.2f s" % TARGET_ACCURACY,
              "steps/s per worker", "steps/s together", "failed runs"]
    rows = [[s["entry"], fmt(s["workers"]), fmt(s["test_accuracy"], 4), fmt(s["wall_seconds"]),
             fmt(wall_ratio(s, summaries), 2), fmt(s["launch_to_target_seconds"]),
             fmt(s["steps_per_second_per_worker"], 0), fmt(s["aggregate_steps_per_second"], 0),
             "%d/%d" % (s["failures"], s["repeats"])]
            for s in summaries]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def ratios(summaries):
    """The step-time ratio of one ps + one worker against one process, measured side by side."""
    by_entry = {s["entry"]: s for s in summaries}
    baseline, distributed = by_entry.get(BASELINE), by_entry.get("Distributed-Setup/run.sh")
    lines = []
    if baseline and distributed and distributed["steps_per_second_per_worker"]:
        ratio = (baseline["steps_per_second_per_worker"]
                 / distributed["steps_per_second_per_worker"])
        lines.append("- one ps + one worker (Distributed-Setup) step time: %.2f× the one-process "
                     "step (target ≤ %.1f×)" % (ratio, TARGETS["step_time_ratio"]))
    walls = [s for s in summaries if s["entry"] != BASELINE and s["wall_seconds"] is not None]
    if walls:
        slowest = max(walls, key=lambda s: s["wall_seconds"])
        lines.append("- slowest run.sh, Enter to prompt: %s, %.1f s (target ≤ %.0f s)"
                     % (slowest["entry"], slowest["wall_seconds"], TARGETS["wall_seconds"]))
        over = [s["entry"] for s in walls
                if (wall_ratio(s, summaries) or 0) > TARGETS["wall_ratio"]]
        if wall_ratio(slowest, summaries) is not None:
            lines.append("- run.sh walls within %.1f× the one-process script's: %d of %d (the "
                         "slowest %.2f×)%s" % (
                             TARGETS["wall_ratio"], len(walls) - len(over), len(walls),
                             wall_ratio(slowest, summaries),
                             "; over: " + ", ".join(over) if over else ""))
    reached = [s for s in summaries if s["launch_to_target_seconds"] is not None]
    if reached:
        first = min(reached, key=lambda s: s["launch_to_target_seconds"])
        lines.append("- first to %.2f test accuracy: %s, %.1f s after launch (target ≤ %.0f s)"
                     % (TARGET_ACCURACY, first["entry"], first["launch_to_target_seconds"],
                        TARGETS["launch_to_target_seconds"]))
    return "\n".join(lines)


def cpu_per_step(script, workers, steps=(500, 2500)):
    """CPU seconds per step of each task during training alone: two runs of different length,
    differenced, so that start-up (imports, session creation) cancels out."""
    totals = []
    for train_steps in steps:
        if script == BASELINE:
            process = subprocess.run([sys.executable, os.path.join(ROOT, BASELINE),
                                      "--train_steps", str(train_steps)], timeout=900,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            text = process.stdout.decode()
            totals.append({"process": [json.loads(m.group(2))["cpu_seconds"] for m in map(
                RESULT_PATTERN.match, text.splitlines()) if m][0]})
            continue
        with LocalCluster(os.path.join(ROOT, script), workers=workers, echo=False,
                          args=["--train_steps", str(train_steps)]) as cluster:
            cluster.start()
            if not cluster.wait(900) or cluster.failed():
                raise RuntimeError("profiling run failed: %s" % cluster.returncodes())
        ps_line = cluster.task("ps0").lines[-1]
        totals.append({"ps": float(ps_line.split("(")[-1].split(" s of CPU")[0]),
                       "workers": sum(r["cpu_seconds"] for r in cluster.results())})
    return {task: (totals[1][task] - totals[0][task]) / (steps[1] - steps[0]) * 1e6
            for task in totals[0]}


def profile():
    """Where a distributed step's time goes: CPU microseconds per global step, by task."""
    one_process = cpu_per_step(BASELINE, 1)["process"]
    distributed = cpu_per_step("Distributed-Setup/dist_setup.py", 1)
    lines = ["CPU time per step (µs), training only:",
             "- one process: %.0f" % one_process,
             "- one ps + one worker: worker %.0f + ps %.0f = %.0f, i.e. %.1f× the one-process "
             "step in CPU alone" % (distributed["workers"], distributed["ps"],
                                    distributed["workers"] + distributed["ps"],
                                    (distributed["workers"] + distributed["ps"]) / one_process)]
    return "\n".join(lines)


def machine():
    try:
        import tensorflow
        tf_version = tensorflow.__version__
    except ImportError:
        tf_version = "not importable here"
    return "%s, %d cores, Python %s, TensorFlow %s" % (
        platform.platform(terse=True), os.cpu_count(), platform.python_version(), tf_version)


def render(report):
    """The Markdown the README shows for one benchmark report."""
    return "%s\n\n%s\n\nMeasured by `python tools/benchmark.py --repeats %d` on %s, %s." % (
        table(report["summaries"]), ratios(report["summaries"]), report["repeats"],
        report["machine"], report["date"])


def section_bounds(text):
    """Where the README's results section starts and ends, between its two markers."""
    return text.index(README_START) + len(README_START), text.index(README_END)


def readme_section(text):
    start, end = section_bounds(text)
    return text[start:end].strip()


# The measured columns of the README's "Choosing an algorithm" table: the record's key and
# digits (None: the run.sh wall over the one-process wall of the same run).
CHOOSING_COLUMNS = {"test accuracy": ("test_accuracy", 4),
                    "launch → %.2f s" % TARGET_ACCURACY: ("launch_to_target_seconds", 1),
                    "steps/s together": ("aggregate_steps_per_second", 0),
                    "× the one-process wall": (None, 2)}


def choosing_cells(row, header, summaries):
    """A row of the Choosing table with its measured cells from summaries ("-": an example
    the record lacks)."""
    target = re.search(r"\]\(([^)]+)\)", row[0]).group(1).rstrip("/")
    summary = next((s for s in summaries
                    if s["entry"] == target or s["entry"].startswith(target + "/")), None)
    cells = list(row)
    for i, name in enumerate(header):
        if name in CHOOSING_COLUMNS:
            key, digits = CHOOSING_COLUMNS[name]
            cells[i] = "-" if summary is None else fmt(
                wall_ratio(summary, summaries) if key is None else summary[key], digits)
    return cells


def with_choosing_table(text, summaries):
    """text with the Choosing table's measured cells rewritten from summaries."""
    start = text.index("## Choosing an algorithm")
    end = text.index("\n## ", start + 1)
    lines, header = text[start:end].split("\n"), None
    for n, line in enumerate(lines):
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        else:
            lines[n] = "| %s |" % " | ".join(choosing_cells(cells, header, summaries))
    return text[:start] + "\n".join(lines) + text[end:]


def update_readme(report):
    text = open(README).read()
    start, end = section_bounds(text)
    text = text[:start] + "\n" + render(report) + "\n" + text[end:]
    open(README, "w").write(with_choosing_table(text, report["summaries"]))
    os.makedirs(os.path.dirname(RECORD), exist_ok=True)
    with open(RECORD, "w") as out:
        json.dump(report, out, indent=1)


def example_script(folder):
    """The script that a folder's run.sh launches."""
    text = open(os.path.join(ROOT, folder, "run.sh")).read()
    return os.path.join(ROOT, folder, re.search(r'"\$here/([^"/]+\.py)"', text).group(1))


def rss_kb(pid):
    """A process's resident set size, from /proc/PID/status; None once it has exited."""
    try:
        with open("/proc/%d/status" % pid) as status:
            return next((int(line.split()[1]) for line in status
                         if line.startswith("VmRSS:")), None)
    except FileNotFoundError:
        return None


GLOBAL_STEP = re.compile(r"\(global (\d+)\)")  # in the workers' progress lines
STARTUP_BOUND = 120  # seconds from a soak's launch to its first progress line, at most


def global_step(cluster):
    """The highest global step in the workers' latest progress lines (0 before the first)."""
    latest = [next((int(match.group(1)) for match in map(GLOBAL_STEP.search, reversed(task.lines))
                    if match), 0) for task in cluster.tasks]
    return max(latest)


def soak(folder, seconds, start_bound=STARTUP_BOUND, output=None):
    """Train one example for `seconds` (with a --train_steps it never reaches), sampling every
    task's RSS; then the growth from the end of the warm-up (the first third) to the end, in MB
    per minute and KB per 1000 global steps: a leak shows as a steady growth. The seconds count
    from the first progress line, when training is under way: start-up, which takes longer on a
    busy machine, is sampled too but not counted (at most start_bound seconds of it)."""
    interval = min(5.0, seconds / 10)  # every few seconds, and at least ten samples
    samples = []  # (seconds since the launch, global step, {task: RSS in KB})
    cluster = LocalCluster(example_script(folder), echo=False,
                           args=["--train_steps", "1000000000", "--log_every", "100"])
    with cluster:
        cluster.start()
        print("[benchmark] soak: %s for %g s of training, RSS every %g s of %s" % (
            os.path.relpath(cluster.script, ROOT), seconds, interval, ", ".join(
                "%s (pid %d)" % (task.name, task.process.pid) for task in cluster.tasks)),
            flush=True)
        launched, training = time.monotonic(), None
        while True:
            elapsed = time.monotonic() - launched
            samples.append((elapsed, global_step(cluster),
                            {task.name: rss_kb(task.process.pid) for task in cluster.tasks}))
            print(soak_row(cluster, samples[-1], header=len(samples) == 1), flush=True)
            if training is None and samples[-1][1] > 0:
                training = elapsed
            if training is not None and elapsed - training >= seconds or cluster.failed():
                break
            if training is None and elapsed >= start_bound:
                print("[benchmark] soak: no progress line %g s after the launch; stopping"
                      % start_bound, file=sys.stderr)
                return 1
            # The sampling timer, cut short if a task ends (or, during start-up, at the first
            # progress line).
            wait = interval if training is None else min(interval, training + seconds - elapsed)
            cluster.wait_for(lambda: cluster.failed() or (training is None and
                                                           global_step(cluster) > 0), wait)
        failed = cluster.failed()
    print("[benchmark] soak: every task stopped")
    if failed:
        print("[benchmark] soak: %s failed; returncodes %s\n%s" % (
            ", ".join(task.name for task in failed), cluster.returncodes(),
            "\n".join(line for task in failed for line in task.lines[-10:])), file=sys.stderr)
        return 1
    growth = soak_growth(cluster, samples, training + seconds / 3)
    print(growth)
    if output:
        print("[benchmark] soak: wrote %s" % ", ".join(
            write_soak(output, folder, cluster, samples, training, growth)))
    return 0


def write_soak(output, folder, cluster, samples, training, growth):
    """The samples as JSON and each task's RSS over the seconds of training as a chart."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot
    os.makedirs(output, exist_ok=True)
    stem = os.path.join(output, "soak-%s" % folder)
    with open(stem + ".json", "w") as record:
        json.dump({"example": folder, "machine": machine(), "date": time.strftime("%Y-%m-%d"),
                   "command": "python tools/benchmark.py --soak %g --only %s --soak_output %s" % (
                       samples[-1][0] - training, folder, os.path.relpath(output, ROOT)),
                   "growth": growth.splitlines(), "training_started_s": round(training, 1),
                   "samples": [[round(t, 1), step, rss] for t, step, rss in samples]},
                  record, indent=1)
    figure, axis = pyplot.subplots(figsize=(8, 4))
    for task in cluster.tasks:
        kept = [(t - training, rss[task.name] / 1024) for t, _, rss in samples
                if t >= training and rss.get(task.name)]
        axis.plot([t / 60 for t, _ in kept], [mb for _, mb in kept], label=task.name)
    axis.set_xlabel("minutes of training")
    axis.set_ylabel("resident memory (MB)")
    axis.set_title("%s: each task's memory over a %.0f-minute soak" % (
        folder, (samples[-1][0] - training) / 60))
    axis.legend()
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(stem + ".png", dpi=100)
    return [stem + ".json", stem + ".png"]


def soak_row(cluster, sample, header=False):
    """One line of the soak table: seconds, global step, then each task's RSS in MB."""
    columns = ["%s MB" % task.name for task in cluster.tasks]
    row = "%7.1f  %11d" % sample[:2] + "".join(
        "  " + ("%.1f" % (rss / 1024) if rss else "-").rjust(len(column))
        for rss, column in zip(sample[2].values(), columns))
    return "      s  global step  " + "  ".join(columns) + "\n" + row if header else row


def soak_growth(cluster, samples, warm_up):
    """RSS growth of each task from the first sample after the warm-up to the last."""
    first = next(sample for sample in samples if sample[0] >= warm_up)
    last = samples[-1]
    minutes, steps = (last[0] - first[0]) / 60, last[1] - first[1]
    lines = ["growth after the warm-up, from %.0f s to %.0f s (global step %d to %d):"
             % (first[0], last[0], first[1], last[1])]
    for task in cluster.tasks:
        before, after = first[2][task.name], last[2][task.name]
        if not (before and after and minutes):
            lines.append("  %8s  -" % task.name)
            continue
        growth = after - before
        lines.append("  %8s  %+8.1f MB  %+7.2f MB/min  %s KB per 1000 global steps" % (
            task.name, growth / 1024, growth / 1024 / minutes,
            "%+.1f" % (growth / (steps / 1000)) if steps else "-"))
    return "\n".join(lines)


# --peers: ours against the programs a user would pick instead (issue 19).
PEERS_DIR = os.path.join(ROOT, "tools", "peers")
TORCH_INSTALL = ("python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch numpy "
                 "scikit-learn --index-url https://download.pytorch.org/whl/cpu, then "
                 "--torch_python /tmp/torchvenv/bin/python")
TF2_INSTALL = "bash setup.sh --tf2, then --tf2_python .venv-tf2/bin/python (found there by itself)"
K = 100  # --steps_per_run of Distributed-Setup's loop, the one example that has it
OURS = ["Hogwild/run.sh", "AGN/run.sh", "Synchronous-SGD/run.sh",
        "Distributed-Setup/run.sh K=%d" % K]
# name: (script in tools/peers, interpreter route, the modules it needs, how to install them)
PEERS = {"tf2-ps": ("tf2_ps.py", "tf2", "tensorflow, sklearn", TF2_INSTALL),
         "torch-ddp": ("torch_ddp.py", "torch", "torch, sklearn", TORCH_INSTALL),
         "torch-hogwild": ("torch_hogwild.py", "torch", "torch, sklearn", TORCH_INSTALL)}
# (ours, peer, measure, target or None): the pairs issue 19 names. A ratio is ours / peer:
# below 1 for a time means ours is faster, above 1 for steps/s means ours is faster.
PAIRS = [("Hogwild/run.sh", "tf2-ps", "wall_seconds", None),
         ("AGN/run.sh", "tf2-ps", "wall_seconds", None),
         ("Hogwild/run.sh", "tf2-ps", "launch_to_target_seconds", None),
         ("AGN/run.sh", "tf2-ps", "launch_to_target_seconds", None),
         ("Hogwild/run.sh", "tf2-ps", "aggregate_steps_per_second", None),
         ("AGN/run.sh", "tf2-ps", "aggregate_steps_per_second", None),
         ("Synchronous-SGD/run.sh", "torch-ddp", "wall_seconds", None),
         ("Synchronous-SGD/run.sh", "torch-ddp", "launch_to_target_seconds", None),
         ("Synchronous-SGD/run.sh", "torch-ddp", "aggregate_steps_per_second", 1.0),
         ("Hogwild/run.sh", "torch-hogwild", "aggregate_steps_per_second", None),
         ("AGN/run.sh", "torch-hogwild", "aggregate_steps_per_second", None),
         ("Distributed-Setup/run.sh K=%d" % K, "torch-hogwild", "aggregate_steps_per_second",
          0.25)]
MEASURES = {"wall_seconds": "whole launch s", "launch_to_target_seconds": "launch → %.2f s"
            % TARGET_ACCURACY, "aggregate_steps_per_second": "aggregate steps/s"}
K_NOTE = ("the torch Hogwild target is for K = %d steps per session.run (Distributed-Setup's "
          "--steps_per_run %d, a tf.while_loop on the worker: the same lock-free update as "
          "Hogwild's); the rows without K are one step per call, for comparison" % (K, K))


def peer_interpreters(options):
    """The Python that runs each interpreter route: --torch_python / --tf2_python, else this
    one for torch (where torch is importable) and .venv-tf2 for TF2."""
    tf2 = options.tf2_python or os.path.join(ROOT, ".venv-tf2", "bin", "python")
    return {"torch": options.torch_python or sys.executable, "tf2": tf2}


def peer_skip_reason(name, python):
    """None if the peer can run with `python`, else one line: why not, and how to install it."""
    script, route, modules, install = PEERS[name]
    if not python or not os.path.exists(python):
        return "%s skipped: no interpreter at %s; install: %s" % (name, python, install)
    check = "import sys, %s" % modules
    if route == "tf2":
        check += "; assert int(tensorflow.__version__.split('.')[0]) >= 2, 'TensorFlow 1'"
    try:
        process = subprocess.run([python, "-c", check], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=120,
                                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    except (OSError, subprocess.TimeoutExpired) as error:
        return "%s skipped: %s cannot run (%s); install: %s" % (name, python, error, install)
    if process.returncode:
        last = (process.stdout.decode("utf-8", "replace").strip().splitlines() or ["?"])[-1]
        return "%s skipped: %s cannot import %s (%s); install: %s" % (
            name, python, modules, last, install)
    return None


def ratio(mine, theirs):
    return mine / theirs if mine is not None and theirs else None


def paired_ratios(runs, mine, theirs, measure):
    """ours / peer for each round in which both ran (interleaved: same load, same minute)."""
    by_round = {}
    for run in runs:
        by_round.setdefault(run["round"], {})[run["entry"]] = run
    values = [ratio(pair[mine].get(measure), pair[theirs].get(measure))
              for pair in by_round.values() if mine in pair and theirs in pair]
    return [value for value in values if value is not None]


def spread(values, digits=1):
    """median (min–max) of the values that are not None."""
    values = [value for value in values if value is not None]
    if not values:
        return "-"
    text = fmt(float(statistics.median(values)), digits)
    return text if len(values) == 1 else "%s (%s–%s)" % (
        text, fmt(float(min(values)), digits), fmt(float(max(values)), digits))


def peers_table(runs, contestants):
    header = ["program", "workers", "test accuracy", "whole launch s", MEASURES[
        "launch_to_target_seconds"], "aggregate steps/s", "failed runs"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in contestants:
        mine = [run for run in runs if run["entry"] == name]
        lines.append("| " + " | ".join([
            name, fmt(mine[0]["workers"]) if mine else "-",
            spread([r["test_accuracy"] for r in mine], 4),
            spread([r["wall_seconds"] for r in mine]),
            spread([r["launch_to_target_seconds"] for r in mine]),
            spread([r["aggregate_steps_per_second"] for r in mine], 0),
            "%d/%d" % (sum(r["exit_code"] != 0 for r in mine), len(mine))]) + " |")
    return "\n".join(lines)


def peers_ratios(runs):
    """The ratios ours / peer of the pairs issue 19 names, median of the rounds (min–max)."""
    header = ["ours / peer", "measure", "ratio, median of rounds (min–max)", "target"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for mine, theirs, measure, target in PAIRS:
        values = paired_ratios(runs, mine, theirs, measure)
        if not values:
            continue
        goal = "-" if target is None else "≥ %.2f×" % target
        if theirs == "torch-hogwild":
            goal += "*"
        lines.append("| %s / %s | %s | %s× | %s |" % (
            label(mine), theirs, MEASURES[measure], spread(values, 2), goal))
    if len(lines) == 2:
        return "(no pair ran: no ratio to show)"
    if any("*" in line for line in lines):
        lines.append("\n\\* " + K_NOTE + ".")
    return "\n".join(lines)


def label(entry):
    """'Hogwild/run.sh K=100' -> 'Hogwild K=100'; 'AGN/run.sh' -> 'AGN'."""
    return entry.replace("/run.sh", "")


def command_of(entry, extra_args):
    """The command line of one of ours: its run.sh, with --steps_per_run K for 'x/run.sh K=K'."""
    script, _, steps_per_run = entry.partition(" K=")
    if script == BASELINE:
        return [sys.executable, os.path.join(ROOT, BASELINE)] + extra_args
    return ["bash", os.path.join(ROOT, script)] + (
        ["--steps_per_run", steps_per_run] if steps_per_run else []) + extra_args


def load_average():
    try:
        return "load average %s" % " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "load average unknown"


def run_peers(options, extra_args):
    """Ours and every available peer, once per round, in a rotating order, --repeats rounds."""
    interpreters = peer_interpreters(options)
    wanted = options.only.split(",") if options.only else None
    contestants = [name for name in OURS if not wanted or name.split("/")[0] in wanted]
    commands = {}
    for name, (script, route, _, _) in PEERS.items():
        if wanted and name not in wanted:
            continue
        reason = peer_skip_reason(name, interpreters[route])
        if reason:
            print("[benchmark] " + reason, flush=True)
            continue
        contestants.append(name)
        commands[name] = [interpreters[route], os.path.join(PEERS_DIR, script)]
    extra_args = ["--log_every", "50"] + extra_args
    started, runs, loads = time.time(), [], [load_average()]
    for round_ in range(options.repeats):
        order = contestants[round_ % len(contestants):] + contestants[:round_ % len(contestants)]
        for name in order:
            print("[benchmark] round %d of %d: %s" % (round_ + 1, options.repeats, name),
                  flush=True)
            run = run_once(name, extra_args, sys.executable, command=commands[name] + extra_args
                           if name in commands else command_of(name, extra_args))
            run["round"] = round_
            if run["exit_code"]:
                print(run["output_tail"], file=sys.stderr)
            runs.append(run)
        loads.append(load_average())
    report = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "repeats": options.repeats, "contestants": contestants, "loads": loads,
              "interpreters": {name: commands[name][0] for name in commands}, "runs": runs}
    os.makedirs(OUTPUT, exist_ok=True)
    with open(os.path.join(OUTPUT, "peers.json"), "w") as out:
        json.dump(report, out, indent=1)
    print("\n" + render_peers(report))
    print("\n[benchmark] %d runs in %.0f s; raw results in %s" % (
        len(runs), time.time() - started, os.path.relpath(os.path.join(OUTPUT, "peers.json"))))
    return 1 if any(run["exit_code"] for run in runs) else 0


def render_peers(report):
    return ("%s\n\n%s\n\nRatios are ours / peer, round by round (the same load for both): "
            "below 1× for a time, above 1× for steps/s, ours is faster.\n"
            "%d interleaved rounds on %s, %s; %s." % (
                peers_table(report["runs"], report["contestants"]), peers_ratios(report["runs"]),
                report["repeats"], report["machine"], report["date"],
                " → ".join(report["loads"])))


# --floor: the one-process step against one ps + one worker, K steps per session.run.
FLOOR = [BASELINE] + ["Distributed-Setup/run.sh K=%d" % k for k in (1, 10, K)]


def run_floor(options, extra_args):
    """The baseline and Distributed-Setup with K = 1, 10, 100, once per round in a rotating
    order, --repeats rounds; the step time of each, and its ratio to the one-process step of
    the same round."""
    extra_args = ["--train_steps", "3000", "--log_every", "1000"] + extra_args
    started, runs, loads = time.time(), [], [load_average()]
    for round_ in range(options.repeats):
        order = FLOOR[round_ % len(FLOOR):] + FLOOR[:round_ % len(FLOOR)]
        for name in order:
            print("[benchmark] floor, round %d of %d: %s" % (round_ + 1, options.repeats, name),
                  flush=True)
            run = run_once(name, extra_args, sys.executable, command=command_of(name, extra_args))
            run["entry"], run["round"] = name, round_
            run["steady_steps_per_second"] = steady_rate(run)
            if run["exit_code"]:
                print(run["output_tail"], file=sys.stderr)
            runs.append(run)
        loads.append(load_average())
    report = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "repeats": options.repeats, "loads": loads, "runs": runs}
    os.makedirs(OUTPUT, exist_ok=True)
    with open(os.path.join(OUTPUT, "floor.json"), "w") as out:
        json.dump(report, out, indent=1)
    print("\n" + render_floor(report))
    print("\n[benchmark] %d runs in %.0f s; raw results in %s" % (
        len(runs), time.time() - started, os.path.relpath(os.path.join(OUTPUT, "floor.json"))))
    return 1 if any(run["exit_code"] for run in runs) else 0


def steady_rate(run):
    """Steps/s of the (first) worker between the first and the last point of its accuracy curve
    (one every --log_every local steps): training in its stride, without what its first
    session.runs cost once (TensorFlow partitions and registers each new graph on every task,
    which for a loop spanning a ps and a worker takes a good part of a second), or None."""
    curve = run["results"][0]["curve"] if run["results"] else []
    if len(curve) < 2 or curve[-1][0] <= curve[0][0]:
        return None
    return (curve[-1][1] - curve[0][1]) / (curve[-1][0] - curve[0][0])


def floor_table(runs):
    header = ["program", "steps per session.run", "steps/s, whole training", "steps/s, steady",
              "µs per step, steady", "× the one-process step (median of rounds, min–max)",
              "target"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in FLOOR:
        mine = [run for run in runs if run["entry"] == name]
        rates = [run["steady_steps_per_second"] for run in mine
                 if run.get("steady_steps_per_second")]
        script, _, steps_per_run = name.partition(" K=")
        ratios_ = paired_ratios([dict(run, step_time=1e6 / run["steady_steps_per_second"])
                                 for run in runs if run.get("steady_steps_per_second")],
                                name, BASELINE, "step_time")
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            label(script) if script != BASELINE else "one process (%s)" % BASELINE,
            steps_per_run or "1", spread([run["steps_per_second_per_worker"] for run in mine],
                                         0),
            spread(rates, 0), spread([1e6 / rate for rate in rates], 0),
            "1" if name == BASELINE else spread(ratios_, 2) + "×",
            "≤ %.1f×" % TARGETS["step_time_ratio"] if steps_per_run == str(K) else "-"))
    return "\n".join(lines)


def render_floor(report):
    return ("%s\n\nSteps/s of the worker: over its whole training (its RESULT line), and "
            "steady, between the first and the last point of its accuracy curve (every 1000 "
            "local steps: without the first session.runs, which register each new graph on every "
            "task once); the ratio is of steady step times. --train_steps 3000; "
            "%d interleaved rounds on %s, %s; %s." % (
                floor_table(report["runs"]), report["repeats"], report["machine"],
                report["date"], " → ".join(report["loads"])))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, help="runs per example (median); default 1, "
                        "or 3 rounds with --peers")
    parser.add_argument("--only", help="comma-separated folder names (the baseline always runs); "
                        "with --peers, folders and peers' names")
    parser.add_argument("--profile", action="store_true",
                        help="only measure CPU time per step of one process and of one ps + "
                             "one worker, to show where a distributed step's time goes")
    parser.add_argument("--readme", action="store_true",
                        help="rewrite README.md's results section, and the measured columns "
                             "of its \"Choosing an algorithm\", from this run")
    parser.add_argument("--soak", type=float, metavar="SECONDS",
                        help="only train one example (the first of --only, default Hogwild) "
                             "this long, and print its tasks' memory (RSS) over time")
    parser.add_argument("--soak_output", metavar="DIR",
                        help="with --soak: also write the samples (JSON) and a chart of each "
                             "task's memory over time (PNG) here")
    parser.add_argument("--peers", action="store_true",
                        help="run Hogwild, AGN and Synchronous-SGD beside TF2's "
                             "ParameterServerStrategy, PyTorch DDP and shared-memory Hogwild "
                             "(those available), interleaved, and print the ratios ours/peer")
    parser.add_argument("--floor", action="store_true",
                        help="only run the one-process baseline and Distributed-Setup with "
                             "--steps_per_run 1, 10 and %d, interleaved, and print each step "
                             "time against the one-process step" % K)
    parser.add_argument("--torch_python", help="with --peers: a Python that imports torch (its "
                        "own venv; torch is not a dependency of the project)")
    parser.add_argument("--tf2_python", help="with --peers: a Python with TensorFlow 2 "
                        "(default .venv-tf2/bin/python, from bash setup.sh --tf2)")
    options, extra_args = parser.parse_known_args(argv)
    if options.peers:
        options.repeats = 3 if options.repeats is None else options.repeats
        return run_peers(options, extra_args)
    if options.floor:
        options.repeats = 3 if options.repeats is None else options.repeats
        return run_floor(options, extra_args)
    options.repeats = 1 if options.repeats is None else options.repeats
    if options.profile:
        print(profile())
        return 0
    if options.soak:
        return soak((options.only or "Hogwild").split(",")[0], options.soak,
                    output=options.soak_output)
    entries = entry_points()
    if options.only:
        wanted = options.only.split(",")
        entries = [e for e in entries if e == BASELINE or e.split("/")[0] in wanted]
    # Finer evaluation points than the default, for the time to accuracy.
    extra_args = ["--log_every", "50"] + extra_args
    started, summaries, raw = time.time(), [], []
    for number, entry in enumerate(entries, 1):
        runs = []
        for repeat in range(options.repeats):
            print("[benchmark] %d/%d %s (run %d of %d)" % (number, len(entries), entry,
                                                            repeat + 1, options.repeats),
                  flush=True)
            runs.append(run_once(entry, extra_args, sys.executable))
            if runs[-1]["exit_code"]:
                print(runs[-1]["output_tail"], file=sys.stderr)
        raw.extend(runs)
        summaries.append(summarize(entry, runs))
    report = {"machine": machine(), "date": time.strftime("%Y-%m-%d"),
              "repeats": options.repeats, "summaries": summaries, "runs": raw}
    os.makedirs(OUTPUT, exist_ok=True)
    with open(os.path.join(OUTPUT, "latest.json"), "w") as out:
        json.dump(report, out, indent=1)
    print("\n" + render(report))
    print("\n[benchmark] %d runs in %.0f s; raw results in %s"
          % (len(raw), time.time() - started, os.path.relpath(OUTPUT)))
    if options.readme:
        update_readme(report)
    return 1 if any(s["failures"] for s in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
