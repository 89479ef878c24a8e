"""The report of an emulated comparison (--emulate): the scenarios and how they are scaled, the
measured choice of an algorithm per scenario, the findings and each seed paper's claim, then
per scenario Jin et al.'s table, the results table and the emulation's configured settings
against what was measured. Everything from raw.json, as the other report."""
import os
import re

from . import findings, metrics, plan, plots, report
from .metrics import mean, values

CHOICE_TITLE = "Choosing an algorithm: measured on the emulated clusters"


def mbits(bits):
    return "-" if bits is None else "%.0f Mb/s" % (bits / 1e6)


def milliseconds(seconds):
    return "-" if seconds is None else "%.1f ms" % (1e3 * seconds)


def scenario_table(settings):
    """Each scenario: the real setting and its emulated version."""
    scale = settings["emulate"]["scale"]
    lines = []
    for name in settings["emulate"]["scenarios"]:
        detail = settings["emulate"]["details"][name]
        compute = detail["compute"]
        spread = ("every worker" if compute["kind"] == "homogeneous" else
                  "log-normal σ = %g across workers, 1 in 8 (at least 1) %g× slower"
                  % (compute["sigma"], compute["straggler_factor"]))
        lines.append([
            name, "%s, %.1fM parameters: %.1f MB per θ or g" % (
                detail["model"], detail["parameters"] / 1e6, 4 * detail["parameters"] / 1e6),
            "%.3f s (%s)" % (compute["mean_seconds"], spread),
            "%g Gb/s" % (detail["link_bits_per_second"] / 1e9),
            "%.1f ms, %s, %.2f MB" % (1e3 * compute["mean_seconds"] / scale,
                                      mbits(detail["link_bits_per_second"] / scale),
                                      4 * detail["parameters"] / scale ** 2 / 1e6)])
    return report.table(["Scenario", "Model", "Real compute time per step",
                         "Real link (each task)", "Emulated: compute, link, θ bytes"], lines)


def sources(settings):
    """Where each scenario's numbers come from."""
    lines = []
    for name in settings["emulate"]["scenarios"]:
        detail = settings["emulate"]["details"][name]
        lines.append("- %s: %s. Model: %s. Compute: %s. Links: %s." % (
            name, detail["title"], detail["model_source"], detail["compute"]["source"],
            detail["link_source"]))
    return "\n".join(lines)


def cell(row):
    """A choice-table cell: the time to the target and its range, or why there is none."""
    if row is None:
        return "—"
    if complete(row):
        return "%s, %d worker%s" % (findings.span(values(row, "time_to_target")),
                                    row["workers"], "" if row["workers"] == 1 else "s")
    return "not reached in every run (final accuracy %.3f)" % row["final_accuracy"]


def complete(row):
    return metrics.complete(row, "time_to_target") is not None


def fastest(rows, settings):
    """{(algorithm's label, scenario): its fastest configuration's row to the target over the
    worker counts it ran (or, where none reached it, its most accurate one)}."""
    section = settings["sections"][0]
    shown = [row for row in rows if row["section"] == section and row["runs_ok"]]
    best = {}
    for name in dict.fromkeys(plan.label(row) for row in shown):
        for scenario in settings["emulate"]["scenarios"]:
            mine = [row for row in shown if row.get("scenario") == scenario
                    and plan.label(row) == name]
            reached = [row for row in mine if complete(row)]
            best[name, scenario] = (
                min(reached, key=lambda row: row["time_to_target"]) if reached else
                max(mine, key=lambda row: row["final_accuracy"] or 0, default=None))
    return best


def choice_table(rows, settings):
    """One row per algorithm, one measured column per scenario: its fastest configuration's
    time to the target (over the worker counts it ran), mean (min–max over repeats)."""
    scenarios = settings["emulate"]["scenarios"]
    best = fastest(rows, settings)
    algorithms = list(dict.fromkeys(name for name, _ in best))
    return report.table(["Algorithm"] + ["%s: time to %.2f" % (scenario, settings["target"])
                                         for scenario in scenarios],
                        [[name] + [cell(best[name, scenario]) for scenario in scenarios]
                         for name in algorithms])


def readme_cells(raw):
    """{example folder: its README cell, the mean seconds to the target per scenario of its
    fastest configuration, "/"-separated ("–": not run, "no": not reached)}."""
    settings = raw["settings"]
    best = fastest(metrics.summarize(raw, settings["target"]), settings)
    return {name: " / ".join(
        "–" if best[name, scenario] is None else "%.1f" % mean(values(
            best[name, scenario], "time_to_target")) if complete(best[name, scenario]) else "no"
        for scenario in settings["emulate"]["scenarios"])
        for name in dict.fromkeys(name for name, _ in best) if name in plan.BY_NAME}


def with_readme_column(text, raw):
    """The README's text with the last column of its "Choosing an algorithm" table rewritten
    from raw ("– / – / –" for an example the comparison did not run)."""
    cells = readme_cells(raw)
    start = text.index("## Choosing an algorithm")
    end = text.index("\n## ", start + 1)
    lines = text[start:end].split("\n")
    for n, line in enumerate(lines):
        link = re.match(r"\| \[[^\]]*\]\(([^)]+)\)", line)
        if link:
            target = link.group(1).rstrip("/")
            name = target[:-len(".py")] if target.endswith(".py") else target
            lines[n] = line[:line.rstrip(" |").rindex(" | ") + 3] + cells.get(
                name, " / ".join(["–"] * len(raw["settings"]["emulate"]["scenarios"]))) + " |"
    return text[:start] + "\n".join(lines) + text[end:]


def measured_table(rows, raw):
    """Per configuration, over its runs: the emulated link and compute beside the measured."""
    lines = []
    for row in rows:
        runs = [run for run in raw["runs"] if run["key"] == row["key"] and run["ok"]
                and run.get("measured")]
        if not runs:
            continue
        workers = [worker for run in runs for worker in run["measured"]["workers"].values()
                   if "compute_measured_seconds" in worker and worker["compute_seconds"]]
        during = [run["measured"]["link_during_run_bits_per_second"] for run in runs]
        peaks = [max(filter(None, (way["peak"] for way in rates.values())), default=None)
                 for rates in during]
        lines.append([
            plan.label(row), str(row["workers"]),
            mbits(runs[0]["link_bits_per_second"]),
            mbits(mean([run["link_measured_bits_per_second"] for run in runs
                        if run["link_measured_bits_per_second"]])),
            mbits(mean([peak for peak in peaks if peak])),
            milliseconds(mean([w["compute_seconds"] for w in workers])),
            milliseconds(mean([w["compute_measured_seconds"] for w in workers])),
            "%+.0f%%" % (100 * max(w["compute_measured_seconds"] / w["compute_seconds"] - 1
                                  for w in workers)),
            milliseconds(mean([w["cpu_seconds_per_step"] for w in workers])),
            milliseconds(mean([w["step_seconds"] for w in workers])),
            "%.1f s" % mean([run["measured"]["start_up_seconds"] for run in runs])])
    return report.table(
        ["Configuration", "Workers", "Link configured", "Link measured (bulk TCP)",
         "Busiest second on the %s link" % ("ps's or worker 0's"), "Compute configured",
         "Compute measured", "Most above configured (a worker)", "TensorFlow CPU per step",
         "Step, all in", "Start-up"], lines)


def scenario_sections(rows, raw, drawn):
    settings = raw["settings"]
    section = settings["sections"][0]
    parts = []
    for scenario in settings["emulate"]["scenarios"]:
        mine = [row for row in rows if row.get("scenario") == scenario]
        if not mine:
            continue
        parts += ["## Scenario %s: %s" % (scenario,
                                           settings["emulate"]["details"][scenario]["title"]),
                  findings.jin_question(mine, settings, section),
                  report.section_intro(section, settings),
                  report.markdown_table([row for row in mine if row["section"] == section]),
                  "Configured against measured (means over the runs and workers; the compute "
                  "time measured is the configured one plus the worker's waits for a CPU):",
                  measured_table([row for row in mine if row["section"] == section], raw)]
    parts += ["![%s](%s)" % (name[:-len(".png")].replace("_", " "), name) for name in drawn]
    return parts


def header(settings):
    lines = report.header(settings)
    lines[0] = "# Synchronous or asynchronous? Measured on emulated clusters"
    scale = settings["emulate"]["scale"]
    lines.append(
        "Every run is the real example script with its ps and workers as real TensorFlow "
        "tasks, each in a network namespace of its own behind a link shaped by htb; each "
        "worker sleeps its compute time after each step and θ carries the model's bytes "
        "(tools/emulate, docs/emulation.md). All is scaled by F = %g: compute times and link "
        "rates ÷ %g, bytes ÷ %g, so a run lasts 1/%g of the real time. Latency is not "
        "emulated. Time zero of every run is the start of training (TensorFlow's start-up "
        "is not counted)." % (scale, scale, scale ** 2, scale))
    return lines


def write_report(raw, output):
    """comparison.md, comparison.csv and the plots of an emulated comparison."""
    settings = raw["settings"]
    rows = metrics.summarize(raw, settings["target"])
    report.write_csv(rows, os.path.join(output, report.CSV_FILE),
                     ["scenario"] + report.CSV_COLUMNS)
    drawn = plots.write_plots(raw, rows, output)
    found = findings.emulated_findings(rows, settings, raw["runs"])
    choice = choice_table(rows, settings)
    parts = header(settings) + [
        "## The scenarios", scenario_table(settings), sources(settings),
        "## " + CHOICE_TITLE,
        "Each cell: the algorithm's fastest configuration to %.2f test accuracy over the worker "
        "counts it ran, mean (min–max over repeats), from the start of training." %
        settings["target"], choice, "## What we found", found]
    parts += scenario_sections(rows, raw, drawn)
    parts += ["## The budget", report.details(plan.__doc__), report.budget_table(raw),
              "## How the numbers are computed", report.details(metrics.__doc__)]
    failed = [run for run in raw["runs"] if not run["ok"]]
    if failed:
        parts += ["## Failed runs", "\n".join("- %s, repeat %d: %s" % (
            run["key"], run["repeat"] + 1, run["error"]) for run in failed)]
    with open(os.path.join(output, report.MARKDOWN_FILE), "w") as out:
        out.write("\n\n".join(parts) + "\n")
    return rows, choice + "\n\n" + found
