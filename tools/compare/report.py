"""The report: tables, findings and plots, all derived from raw.json, so that --replot redraws
it without running anything."""
import csv
import os

from . import findings, metrics, plan, plots
from .metrics import costs, mean, straggler_pairs

MARKDOWN_FILE, CSV_FILE = "comparison.md", "comparison.csv"
SECTION_TITLES = {plan.EQUAL_MINIBATCHES: "Equal minibatches", plan.EQUAL_UPDATES: "Equal updates",
                  plan.STRAGGLER: "With a straggler (equal minibatches)",
                  plan.EQUAL_WORK: "Equal work per worker"}

# comparison.csv: one row per (section, configuration), plain numbers (means, and the sample
# standard deviations over repeats in the *_spread columns).
CSV_COLUMNS = ["section", "budget", "algorithm", "family", "workers", "aggregated",
               "straggler_delay", "runs_ok", "train_steps", "minibatches", "theta_updates",
               "final_accuracy", "final_accuracy_spread", "time_to_target",
               "time_to_target_spread", "reached", "examples_per_second",
               "examples_per_second_spread", "global_updates", "wall_seconds", "speedup"]


def fmt(value, digits=1):
    if value is None:
        return "-"
    return "%.*f" % (digits, value) if isinstance(value, float) else str(value)


def plus_minus(measure, digits):
    """A Markdown cell: the mean ± the spread over repeats."""
    def cell(row):
        if row[measure] is None:
            return "-"
        return "%.*f ± %.*f" % (digits, row[measure], digits, row[measure + "_spread"])
    return cell


MARKDOWN_COLUMNS = [
    ("Section", lambda row: row["section"]), ("Algorithm", lambda row: row["algorithm"]),
    ("Family", lambda row: row["family"]), ("Workers", lambda row: str(row["workers"])),
    ("Aggregated N", lambda row: fmt(row["aggregated"])),
    ("Straggler s/step", lambda row: fmt(row["straggler_delay"], 3)),
    ("Runs ok", lambda row: "%d/%d" % (row["runs_ok"], row["runs"])),
    ("--train_steps", lambda row: str(row["train_steps"])),
    ("Minibatches", lambda row: str(row["minibatches"])),
    ("θ updates", lambda row: str(row["theta_updates"])),
    ("Final test accuracy", plus_minus("final_accuracy", 4)),
    ("Time to target s", plus_minus("time_to_target", 2)),
    ("Reached target", lambda row: "%d/%d" % (row["reached"], row["runs_ok"])),
    ("Examples/s", plus_minus("examples_per_second", 1)),
    ("Global updates", lambda row: fmt(row["global_updates"], 1)),
    ("Wall s", lambda row: fmt(row["wall_seconds"], 2)),
    ("Speed-up vs baseline", lambda row: fmt(row["speedup"], 3))]


def table(headings, lines):
    """A Markdown table from its headings and its rows of cells."""
    return "\n".join(["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
                     + ["| " + " | ".join(cells) + " |" for cells in lines])


def markdown_table(rows):
    return table([heading for heading, _ in MARKDOWN_COLUMNS],
                 [[cell(row) for _, cell in MARKDOWN_COLUMNS] for row in rows])


def write_csv(rows, path, columns=CSV_COLUMNS):
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(name) is None else
                             repr(row[name]) if isinstance(row[name], float) else row[name]
                             for name in columns])


def straggler_table(pairs, delay):
    """Each configuration without and with the straggler, on both measures side by side."""
    headings = ["Configuration", "Family"]
    for measure in ("time_to_target", "wall_seconds"):
        words = metrics.MEASURE_WORDS[measure].capitalize()
        headings += ["%s s, without straggler" % words,
                     "%s s, with (+%g s/step)" % (words, delay),
                     "%s, cost (with / without)" % words]
    lines = []
    for pair in pairs:
        cells = [plan.label(pair["slow"]), pair["slow"]["family"]]
        for measure in ("time_to_target", "wall_seconds"):
            cost = mean(costs(pair, measure))
            cells += [fmt(pair["normal"][measure], 2), fmt(pair["slow"][measure], 2),
                      "-" if cost is None else "%.2f×" % cost]
        lines.append(cells)
    return table(headings, lines)


def budget_table(raw):
    """The arithmetic of each configuration's --train_steps, under each budget it runs for."""
    lines = [[plan.label(config), str(config["workers"]),
              str(config["minibatches_per_global_step"]), str(config["updates_per_global_step"]),
              str(config["train_steps"]),
              str(config["train_steps"] * config["minibatches_per_global_step"]),
              str(config["train_steps"] * config["updates_per_global_step"]),
              ", ".join(config["sections"])]
             for config in raw["plan"] if not config["straggler_task"]]
    return table(["Configuration", "Workers", "Minibatches per global step",
                  "θ updates per global step", "--train_steps", "Minibatches", "θ updates",
                  "Tables"], lines)


def section_intro(section, settings):
    """Which budget a table uses, and what that means for the synchronous rows."""
    budget, batch = settings["budget"], settings["batch_size"]
    if section == plan.EQUAL_WORK:
        return ("Budget: equal work per worker. Every worker computes %d minibatches of %d "
                "examples (the same emulated compute time); a synchronous run makes one θ "
                "update per minibatch of each worker, an asynchronous one an update per "
                "minibatch of any worker, M× more (the θ updates column)." % (budget, batch))
    if section == plan.EQUAL_UPDATES:
        return ("Budget: equal θ updates. Every run makes %d θ updates; a synchronous step "
                "averages N workers' minibatches, so a synchronous run applies N× more "
                "minibatches than an asynchronous one (the Minibatches column). The asynchronous "
                "rows are the same runs as at equal minibatches." % budget)
    text = ("Budget: equal minibatches. Every run applies %d minibatch gradients of %d examples "
            "(%d examples) to θ; a synchronous step averages N of them, so a synchronous run "
            "makes N× fewer θ updates than an asynchronous one (the θ updates column)."
            % (budget, batch, budget * batch))
    if section == plan.STRAGGLER:
        text += (" %d workers; in the slowed runs the last worker sleeps %g s after each step."
                 % (plan.STRAGGLER_WORKERS, settings["straggler_delay"]))
    return text


def header(settings):
    machine = settings["machine"]
    return [
        "# Synchronous or asynchronous? Measured on this machine",
        "Machine: %d core(s), %s; Python %s, TensorFlow %s, matplotlib %s; load average %s at "
        "the start; %s. Command: `%s`." % (
            machine["cores"], machine["platform"], machine["python"], machine["tensorflow"],
            machine["matplotlib"], " ".join("%.2f" % l for l in machine["load_average_at_start"]),
            machine["date"], settings["command"]) + "".join(
                " Resumed on %s (load average %s) by `%s`, which ran only the runs missing." % (
                    more["machine"]["date"], " ".join(
                        "%.2f" % l for l in more["machine"]["load_average_at_start"]),
                    more["command"]) for more in settings.get("resumed", [])),
        "Target test accuracy %.2f; %d repeat(s) per configuration, interleaved, all with seed "
        "%d; test accuracy evaluated every %d local steps of each worker." % (
            settings["target"], settings["repeats"], settings["seed"], settings["log_every"])]


def sections(rows, settings, drawn):
    """The tables, each under the budget it uses, and the plots after them."""
    parts = []
    for section in settings["sections"]:
        shown = [row for row in rows if row["section"] == section]
        parts += ["## " + SECTION_TITLES[section], section_intro(section, settings),
                  markdown_table(shown)]
        if section == plan.STRAGGLER:
            parts.append(straggler_table(straggler_pairs(rows), settings["straggler_delay"]))
    parts += ["![%s](%s)" % (name[:-len(".png")].replace("_", " "), name) for name in drawn]
    return parts


def details(docstring):
    """A module's docstring without its summary line: the methods, written once, in the code
    they describe."""
    return docstring.split("\n\n", 1)[1].strip()


def write_report(raw, output):
    """comparison.md, comparison.csv and the plots, from raw.json's content alone (an
    emulated comparison's: see emulated)."""
    settings = raw["settings"]
    if settings.get("emulate"):
        from . import emulated  # (it builds on this module)
        return emulated.write_report(raw, output)
    rows = metrics.summarize(raw, settings["target"])
    write_csv(rows, os.path.join(output, CSV_FILE))
    drawn = plots.write_plots(raw, rows, output)
    found = findings.findings(rows, settings, raw["runs"])
    failed = [run for run in raw["runs"] if not run["ok"]]
    parts = header(settings) + ["## What we found", found,
                                "## Jin et al.'s question: which family reaches the target first",
                                findings.jin_question(rows, settings)]
    parts += sections(rows, settings, drawn)
    parts += ["## The budget", details(plan.__doc__), budget_table(raw),
              "## How the numbers are computed", details(metrics.__doc__)]
    if failed:
        parts += ["## Failed runs", "\n".join("- %s, repeat %d: %s" % (
            run["key"], run["repeat"] + 1, run["error"]) for run in failed)]
    with open(os.path.join(output, MARKDOWN_FILE), "w") as out:
        out.write("\n\n".join(parts) + "\n")
    return rows, found
