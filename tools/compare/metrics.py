"""The numbers: per run, then per configuration over its repeats, and how two compare.

How each number is computed from raw.json (the tests recompute them the same way):
- launch: the time just before the cluster's first process started; on an emulated cluster,
  the moment training began (the first worker's training loop; tools/emulate). Every
  timestamp of a curve is a real test-set evaluation during training ([unix time, global
  step, test accuracy]).
- time to target: the earliest curve point of any worker with accuracy ≥ --target, minus launch.
- final test accuracy: that of the worker whose final global_step is largest (it has seen the
  most updates; ties: the lowest task index).
- examples/s: Σ over workers of local_steps / wall_seconds, × batch size (work done together).
- global updates: the largest final global_step of the run's workers.
- wall s (time to finish the budget): launch to the end of the cluster's last process.
- minibatches and θ updates: --train_steps × what one global step applies and makes.
- over repeats: the mean of the runs that succeeded, ± their sample standard deviation (0 with
  one run); the time to target is the mean over the runs that reached it, beside how many did.
  Speed-up: the baseline's mean time to target / the row's.
- findings: a value with its min–max over repeats. One configuration is called faster (or
  more accurate, or slowed) than another only when every repeat of the one is on that side of
  every repeat of the other, over two repeats or more: the ranges do not overlap, so it held in
  every repeat. Otherwise the difference is within noise.
"""
import statistics

from . import plan

MEASURES = ("final_accuracy", "time_to_target", "examples_per_second", "global_updates",
            "wall_seconds", "first_evaluation")
# The two measures a straggler's cost is given on, in words.
MEASURE_WORDS = {"time_to_target": "time to target", "wall_seconds": "time to finish the budget"}


def run_metrics(record, target, batch_size):
    """One run's numbers, from its RESULT lines and curves only."""
    results = record["results"]
    if not results:
        return dict.fromkeys(MEASURES)
    most_updates = max(results, key=lambda r: (r["global_step"], -r["task_index"]))
    points = [point for r in results for point in r["curve"]]
    reached = [time for time, _, accuracy in points if accuracy >= target]
    first = min((time for time, _, _ in points), default=None)
    return {
        "final_accuracy": most_updates["test_accuracy"],
        "time_to_target": min(reached) - record["launched"] if reached else None,
        "examples_per_second": batch_size * sum(r["local_steps"] / r["wall_seconds"]
                                                for r in results if r["wall_seconds"] > 0),
        "global_updates": max(r["global_step"] for r in results),
        "wall_seconds": record.get("ended", record["launched"]) - record["launched"],
        "first_evaluation": None if first is None else first - record["launched"]}


def mean(values):
    return statistics.mean(values) if values else None


def spread(values):
    """The sample standard deviation; 0 for one value, None for none."""
    return statistics.stdev(values) if len(values) >= 2 else 0.0 if values else None


def per_repeat(records, repeats, target, batch_size):
    """{measure: [value of repeat 0, 1, ...]}, None where the run failed or, for the time to
    target, did not reach it: repeat r of two configurations ran side by side in time."""
    table = {measure: [None] * repeats for measure in MEASURES}
    for record in records:
        if record["ok"] and record["repeat"] < repeats:
            for measure, value in run_metrics(record, target, batch_size).items():
                table[measure][record["repeat"]] = value
    return table


def summarize(raw, target):
    """One row per (section, configuration): the plan's numbers and the means over repeats."""
    settings = raw["settings"]
    rows = []
    for config in raw["plan"]:
        records = [record for record in raw["runs"] if record["key"] == config["key"]]
        repeats = per_repeat(records, settings["repeats"], target, settings["batch_size"])
        row = dict(config, runs=len(records), runs_ok=sum(r["ok"] for r in records),
                   per_repeat=repeats,
                   minibatches=config["train_steps"] * config["minibatches_per_global_step"],
                   theta_updates=config["train_steps"] * config["updates_per_global_step"])
        for measure in MEASURES:
            present = values(row, measure)
            row[measure] = mean(present)
            row[measure + "_spread"] = spread(present)
        row["reached"] = len(values(row, "time_to_target"))
        rows += [dict(row, section=section, budget=plan.BUDGET_OF[section])
                 for section in config["sections"]]
    for row in rows:  # (emulated: each scenario has its own baseline)
        baseline = next((other for other in rows if other["family"] == "baseline"
                         and other.get("scenario") == row.get("scenario")), None)
        row["speedup"] = (baseline["time_to_target"] / row["time_to_target"]
                          if baseline and baseline["time_to_target"] and row["time_to_target"]
                          else None)
    return rows


def values(row, measure):
    """The measure's values over the repeats that have one."""
    return [value for value in row["per_repeat"][measure] if value is not None]


def complete(row, measure):
    """The measure's values if every successful repeat has one (for the time to target: every
    run reached it), else None: a comparison on it would leave runs out."""
    present = values(row, measure)
    return present if present and len(present) == row["runs_ok"] else None


def ratios(numerators, denominators):
    """Repeat by repeat, numerator / denominator, where both repeats have a value."""
    return [a / b for a, b in zip(numerators, denominators)
            if a is not None and b is not None and b > 0]


def order(first, second):
    """'<' when every value of `first` is below every value of `second`, '>' when above, None
    (within noise) when the ranges overlap or either has fewer than two values: with one repeat
    nothing says how far a second would land."""
    if not first or not second or len(first) < 2 or len(second) < 2:
        return None
    if max(first) < min(second):
        return "<"
    if min(first) > max(second):
        return ">"
    return None


def straggler_pairs(rows):
    """The straggler section's configurations, each without and with its slow worker."""
    section = [row for row in rows if row["section"] == plan.STRAGGLER]
    pairs = []
    for slow in (row for row in section if row["straggler_delay"]):
        normal = next((row for row in section if not row["straggler_delay"]
                       and row["algorithm"] == slow["algorithm"]
                       and row["aggregated"] == slow["aggregated"]), None)
        if normal:
            pairs.append({"normal": normal, "slow": slow})
    return pairs


def straggler_measure(pairs):
    """The one measure every pair is compared on: the time to target if every run of every
    pair reached it, else the time to finish the budget (which every run has)."""
    if all(complete(pair[side], "time_to_target") for pair in pairs
           for side in ("normal", "slow")):
        return "time_to_target"
    return "wall_seconds"


def costs(pair, measure):
    """What the straggler cost, repeat by repeat: the measure with it / without it."""
    return ratios(pair["slow"]["per_repeat"][measure], pair["normal"]["per_repeat"][measure])
