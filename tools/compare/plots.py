"""The plots, one measure per axis: no chart sets two quantities against one scale (a bar of
"time to target" beside one of "time to finish the budget" would read as the same thing).
Drawn with matplotlib's object API (Figure, no pyplot): no display, no global state."""
import os

import matplotlib
from matplotlib.figure import Figure

from . import plan
from .metrics import complete, straggler_pairs, values

ACCURACY_PLOT, SCALING_PLOT, STRAGGLER_PLOT = ("accuracy_vs_time.png", "scaling.png",
                                               "straggler.png")
ZERO = {False: "launch", True: "the start of training"}  # an emulated run's time zero
CURVE_TIME = "seconds after %s" % ZERO[False]


def axis_labels(target, emulated=False):
    """Each measure's axis label: every value axis carries exactly one of these."""
    return {"test_accuracy": "test accuracy",
            "time_to_target": "seconds from %s to %.2f test accuracy" % (ZERO[emulated], target),
            "wall_seconds": "seconds from launch to the end of the budget",
            "examples_per_second": "examples/s, all workers together"}


def colours(names):
    """One colour per configuration label, the same in every chart; the baseline black."""
    others = sorted(name for name in names if name != plan.BASELINE)
    cycle = matplotlib.colormaps["tab10" if len(others) <= 10 else "tab20"].colors
    colour_of = {name: cycle[index % len(cycle)] for index, name in enumerate(others)}
    colour_of[plan.BASELINE] = "black"
    return colour_of


def run_curve(record):
    """All workers' evaluations of one run, in time order: (seconds after launch, accuracy)."""
    points = sorted((point[0] - record["launched"], point[2])
                    for result in record["results"] for point in result["curve"])
    return [p[0] for p in points], [p[1] for p in points]


def plot_curves(ax, raw, configs, colour_of, target, emulated=False):
    """Every successful run's test accuracy against time; dashed: the synchronous family."""
    for config in configs:
        records = [r for r in raw["runs"] if r["ok"] and r["key"] == config["key"]]
        for index, record in enumerate(records):
            ax.plot(*run_curve(record), color=colour_of[plan.label(config)],
                    alpha=0.9 if index == 0 else 0.35, linewidth=1.2,
                    linestyle="--" if config["family"] == "synchronous" else "-",
                    label=plan.label(config) if index == 0 else None)
    ax.axhline(target, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel(CURVE_TIME if not emulated else "seconds after %s" % ZERO[True])
    ax.set_ylabel(axis_labels(target)["test_accuracy"])
    ax.set_ylim(max(0.0, target - 0.35), 1.0)
    ax.grid(alpha=0.3)


def legend(ax):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def scaling_sections(settings):
    return [section for section in settings["sections"] if section != plan.STRAGGLER]


def panel_rows(settings):
    """The rows of panels of the scaling and accuracy charts: (name, section, scenario), one
    per budget, or on emulated clusters one per scenario (at the one budget they ran)."""
    if settings.get("emulate"):
        section = scaling_sections(settings)[0]
        return [(scenario, section, scenario) for scenario in settings["emulate"]["scenarios"]]
    return [(section, section, None) for section in scaling_sections(settings)]


def accuracy_figure(raw, colour_of):
    """Accuracy against time: one row of panels per budget (or scenario), one column per
    worker count."""
    settings, panels = raw["settings"], panel_rows(raw["settings"])
    sections = {section for _, section, _ in panels}
    counts = sorted({c["workers"] for c in raw["plan"] if c["family"] != "baseline"
                     and set(c["sections"]) & sections}) or [1]
    figure = Figure(figsize=(6 * len(counts), 4.5 * len(panels)))
    for row_axes, (name, section, scenario) in zip(
            figure.subplots(len(panels), len(counts), squeeze=False), panels):
        for ax, workers in zip(row_axes, counts):
            plot_curves(ax, raw, [c for c in raw["plan"] if section in c["sections"]
                                  and c.get("scenario") == scenario and (
                c["workers"] == workers or c["family"] == "baseline")], colour_of,
                settings["target"], bool(scenario))
            ax.set_title("%s, %d worker(s) (baseline: one process)" % (name, workers))
        legend(row_axes[0])
    figure.suptitle("Test accuracy during training; budget %d%s (dashed: synchronous family)"
                    % (settings["budget"], ", equal work per worker, emulated clusters"
                       if settings.get("emulate") else ""))
    figure.tight_layout()
    return figure


def spans(rows, measure):
    """Error bars from the minimum to the maximum over repeats, around each row's mean."""
    return [[row[measure] - min(values(row, measure)) for row in rows],
            [max(values(row, measure)) - row[measure] for row in rows]]


def against_workers(ax, rows, measure, colour_of):
    """One measure against the number of workers: a line per algorithm, the baseline dotted."""
    for name in sorted({plan.label(row) for row in rows if row["family"] != "baseline"}):
        line = sorted((row for row in rows if plan.label(row) == name
                       and row[measure] is not None), key=lambda row: row["workers"])
        if line:
            ax.errorbar([row["workers"] for row in line], [row[measure] for row in line],
                        yerr=spans(line, measure), capsize=0, marker="o", label=name,
                        linestyle="--" if line[0]["family"] == "synchronous" else "-",
                        color=colour_of[name])
    baseline = next((row for row in rows if row["family"] == "baseline"), None)
    if baseline and baseline[measure] is not None:
        ax.axhline(baseline[measure], color="black", linestyle=":", label="one process")
    ax.set_xlabel("workers")
    ax.set_xticks(sorted({row["workers"] for row in rows}))
    ax.grid(alpha=0.3)


def scaling_figure(raw, rows, colour_of):
    """Throughput and time to target against the workers, a panel each, a row per budget (or
    scenario)."""
    panels = panel_rows(raw["settings"])
    labels = axis_labels(raw["settings"]["target"], bool(raw["settings"].get("emulate")))
    figure = Figure(figsize=(12, 4.5 * len(panels)))
    for row_axes, (name, section, scenario) in zip(
            figure.subplots(len(panels), 2, squeeze=False), panels):
        shown = [row for row in rows if row["section"] == section
                 and row.get("scenario") == scenario]
        for ax, measure in zip(row_axes, ("examples_per_second", "time_to_target")):
            against_workers(ax, shown, measure, colour_of)
            ax.set_ylabel(labels[measure])
            ax.set_title(name)
        legend(row_axes[0])
    figure.suptitle("Scaling; bars: min–max over repeats (dashed: synchronous family)")
    figure.tight_layout()
    return figure


def paired_bars(ax, pairs, measure):
    """Each straggler configuration without and with its slow worker, on one measure, for
    the pairs whose every run has it."""
    shown = [pair for pair in pairs if complete(pair["normal"], measure)
             and complete(pair["slow"], measure)]
    if not shown:
        ax.text(0.5, 0.5, "no pair: some run did not reach it", ha="center",
                transform=ax.transAxes)
    width = 0.38
    for offset, side, name in ((-width / 2, "normal", "without straggler"),
                               (width / 2, "slow", "with straggler")):
        bars = [pair[side] for pair in shown]
        ax.bar([index + offset for index in range(len(shown))], [row[measure] for row in bars],
               width, yerr=spans(bars, measure), label=name)
    ax.set_xticks(list(range(len(shown))))
    ax.set_xticklabels([plan.label(pair["slow"]) for pair in shown], rotation=30, ha="right",
                       fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    legend(ax)


def straggler_figure(raw, rows, colour_of):
    """Accuracy over time with the straggler; time to target and time to finish the budget,
    without and with it, each in its own panel."""
    pairs = straggler_pairs(rows)
    if not pairs:
        return None
    settings, labels = raw["settings"], axis_labels(raw["settings"]["target"])
    figure = Figure(figsize=(18, 4.5))
    curves, reach, finish = figure.subplots(1, 3)
    slow = [config for config in raw["plan"] if config["straggler_task"]]
    plot_curves(curves, raw, slow, colour_of, settings["target"])
    curves.set_title("%d workers, %s slowed by %g s per step" % (
        plan.STRAGGLER_WORKERS, slow[0]["straggler_task"], settings["straggler_delay"]))
    legend(curves)
    for ax, measure, title in ((reach, "time_to_target", "Time to target"),
                               (finish, "wall_seconds", "Time to finish the budget")):
        paired_bars(ax, pairs, measure)
        ax.set_ylabel(labels[measure])
        ax.set_title(title + " (bars: min–max over repeats)")
    figure.tight_layout()
    return figure


def figures(raw, rows):
    """{file name: Figure} of every chart the numbers allow."""
    colour_of = colours({plan.label(config) for config in raw["plan"]})
    drawn = {ACCURACY_PLOT: accuracy_figure(raw, colour_of),
             SCALING_PLOT: scaling_figure(raw, rows, colour_of),
             STRAGGLER_PLOT: straggler_figure(raw, rows, colour_of)}
    return {name: figure for name, figure in drawn.items() if figure is not None}


def write_plots(raw, rows, output):
    """Save every chart into `output`; returns their file names."""
    drawn = figures(raw, rows)
    for name, figure in drawn.items():
        figure.savefig(os.path.join(output, name), dpi=100)
    return list(drawn)
