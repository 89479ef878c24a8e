"""Run every example with its defaults and print what each reached, and how fast.

This is the main job of `bash setup.sh`: each example's run.sh (and the one-process baseline) runs
once, start to prompt, and the table shows its wall time, steps per second, test accuracy and
time from launch to the target accuracy, beside the project's speed targets. With --repeats 3
it reports medians; with --readme it rewrites the results section of README.md from the run.

    python tools/benchmark.py [--repeats N] [--only Hogwild,AGN] [--readme]
"""
import argparse
import glob
import json
import os
import platform
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
# The speed targets (issue 10), printed beside the measurements.
TARGETS = {"wall_seconds": 8.0, "launch_to_target_seconds": 7.0, "async_aggregate": 520.0,
           "step_time_ratio": 2.0}
README_START, README_END = "<!-- benchmark:start -->", "<!-- benchmark:end -->"


def entry_points():
    """The baseline, then every example folder's shell entry points (run.sh, run_sup.sh …)."""
    scripts = sorted(glob.glob(os.path.join(ROOT, "*", "*.sh")))
    return [BASELINE] + [os.path.relpath(path, ROOT) for path in scripts
                         if not os.path.relpath(path, ROOT).startswith(("tools", "tests", "."))]


def run_once(entry, extra_args, python):
    """Run one entry point to the end; returns its measurements."""
    if entry == BASELINE:
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
            "workers": len(results),
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


def table(summaries):
    header = ["example", "workers", "test accuracy", "wall s (run.sh)",
              "launch → %.2f s" % TARGET_ACCURACY, "steps/s per worker", "steps/s together",
              "failed runs"]
    rows = [[s["entry"], fmt(s["workers"]), fmt(s["test_accuracy"], 4), fmt(s["wall_seconds"]),
             fmt(s["launch_to_target_seconds"]), fmt(s["steps_per_second_per_worker"], 0),
             fmt(s["aggregate_steps_per_second"], 0), "%d/%d" % (s["failures"], s["repeats"])]
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
    walls = [s["wall_seconds"] for s in summaries if s["entry"] != BASELINE]
    if walls:
        lines.append("- slowest run.sh, Enter to prompt: %.1f s (target ≤ %.0f s)"
                     % (max(walls), TARGETS["wall_seconds"]))
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


def update_readme(report):
    text = open(README).read()
    start, end = section_bounds(text)
    open(README, "w").write(text[:start] + "\n" + render(report) + "\n" + text[end:])
    os.makedirs(os.path.dirname(RECORD), exist_ok=True)
    with open(RECORD, "w") as out:
        json.dump(report, out, indent=1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs per example (median)")
    parser.add_argument("--only", help="comma-separated folder names (the baseline always runs)")
    parser.add_argument("--profile", action="store_true",
                        help="only measure CPU time per step of one process and of one ps + "
                             "one worker, to show where a distributed step's time goes")
    parser.add_argument("--readme", action="store_true",
                        help="rewrite README.md's results section from this run")
    options, extra_args = parser.parse_known_args(argv)
    if options.profile:
        print(profile())
        return 0
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
