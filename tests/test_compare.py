"""tools/compare (python -m tools.compare): one command runs the algorithms under two budgets,
equal minibatches and equal updates, and writes the measured answer to "synchronous or
asynchronous?" (tables, plots, findings, raw results).

One real quick comparison runs once for the whole module, on two algorithms with tiny budgets,
one worker count, 2, and no straggler section: the baseline, Hogwild and Synchronous-SGD with 2
workers at equal minibatches, and Synchronous-SGD again at equal updates (the baseline's and
Hogwild's runs serve both budgets): 4 runs. Every number of its tables is recomputed here from
raw.json, independently of the tool's code; the straggler's own flag is checked on the cluster's
commands. The findings' conditions, the straggler section with its backup worker and the charts'
axes are tested on raw.json files made here with chosen numbers over two repeats: `--plan`
writes the plan, the test fills in the runs, `--replot` writes the report (or, where no file is
needed, the tool's functions compute it here). Nothing asserts on timing.
"""
import contextlib
import csv
import io
import json
import math
import os
import shutil
import statistics
import sys

import pytest

from helpers import ROOT, run_script

import compare  # tools/compare/ (helpers put tools/ on the path)
from compare import findings, metrics, plan, plots

# matplotlib 3.9 calls pyparsing names that pyparsing 3.2 deprecates: not ours to fix.
# The comparisons are run once for the module (its fixtures): under pytest-xdist one worker runs
# all of it.
pytestmark = [pytest.mark.filterwarnings("ignore:'.*' deprecated - use '.*'"),
              pytest.mark.xdist_group("compare")]

TARGET = 0.6
BUDGET = 60
BATCH_SIZE = 32
CSV_COLUMNS = ["section", "budget", "algorithm", "family", "workers", "aggregated",
               "straggler_delay", "runs_ok", "train_steps", "minibatches", "theta_updates",
               "final_accuracy", "final_accuracy_spread", "time_to_target",
               "time_to_target_spread", "reached", "examples_per_second",
               "examples_per_second_spread", "global_updates", "wall_seconds", "speedup"]
MARKDOWN_HEADINGS = ["Section", "Algorithm", "Family", "Workers", "Aggregated N",
                     "Straggler s/step", "Runs ok", "--train_steps", "Minibatches", "θ updates",
                     "Final test accuracy", "Time to target s", "Reached target", "Examples/s",
                     "Global updates", "Wall s", "Speed-up vs baseline"]
OUTPUTS = ["comparison.md", "comparison.csv", "raw.json", "accuracy_vs_time.png", "scaling.png",
           "straggler.png"]
REAL_OUTPUTS = OUTPUTS[:-1]  # the real comparison has no straggler section
WORKERS = 2
BUDGETS = {"equal minibatches": "minibatches", "equal updates": "updates",
           "straggler": "minibatches"}


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    """(output folder, console text) of one quick comparison."""
    output = str(tmp_path_factory.mktemp("comparison"))
    code, text = run_script(
        [sys.executable, "-m", "tools.compare", "--quick", "--only", "Hogwild,Synchronous-SGD",
         "--workers", str(WORKERS), "--no_straggler", "--budget", str(BUDGET),
         "--batch_size", str(BATCH_SIZE), "--target", str(TARGET), "--output", output],
        timeout=900, cwd=ROOT)
    assert code == 0, text
    return output, text


def run_in_process(args):
    """The tool's main() here, for --plan and --replot (nothing to isolate, and no second
    interpreter to start); returns (exit code, what it printed)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = compare.main(args)
    return code, printed.getvalue()


def load_raw(output):
    with open(os.path.join(output, "raw.json")) as source:
        return json.load(source)


def read_csv(output):
    with open(os.path.join(output, "comparison.csv"), newline="") as source:
        return list(csv.reader(source))


def markdown_tables(output):
    """Every Markdown table of the report whose header starts with 'Section': list of dicts."""
    rows, header = [], None
    for line in open(os.path.join(output, "comparison.md")).read().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] == "Section":
            header = cells
        elif header and not set(line) <= set("|-"):
            rows.append(dict(zip(header, cells)))
    return rows


# ---------------------------------------------------------------------------------------------
# The expected numbers, computed here from raw.json alone.
# ---------------------------------------------------------------------------------------------
def mean_and_spread(values):
    if not values:
        return None, None
    return sum(values) / len(values), statistics.stdev(values) if len(values) > 1 else 0.0


def expected_rows(raw, target):
    """{(section, key): expected numbers}, by the definitions in the tool's documentation."""
    expected = {}
    for config in raw["plan"]:
        records = [r for r in raw["runs"] if r["key"] == config["key"] and r["ok"]]
        accuracies, times, throughputs, updates, walls = [], [], [], [], []
        for record in records:
            workers = record["results"]
            best = sorted(workers, key=lambda r: (-r["global_step"], r["task_index"]))[0]
            accuracies.append(best["test_accuracy"])
            hits = [t for r in workers for t, _, accuracy in r["curve"] if accuracy >= target]
            if hits:
                times.append(min(hits) - record["launched"])
            throughputs.append(BATCH_SIZE * sum(r["local_steps"] / r["wall_seconds"]
                                                for r in workers))
            updates.append(max(r["global_step"] for r in workers))
            walls.append(record["ended"] - record["launched"])
        numbers = {"reached": len(times), "runs_ok": len(records),
                   "global_updates": mean_and_spread(updates)[0],
                   "wall_seconds": mean_and_spread(walls)[0], "config": config,
                   "minibatches": config["train_steps"] * config["minibatches_per_global_step"],
                   "theta_updates": config["train_steps"] * config["updates_per_global_step"]}
        for name, values in (("final_accuracy", accuracies), ("time_to_target", times),
                             ("examples_per_second", throughputs)):
            numbers[name], numbers[name + "_spread"] = mean_and_spread(values)
        for section in config["sections"]:
            expected[(section, config["key"])] = dict(numbers)
    baseline = next(numbers for numbers in expected.values()
                    if numbers["config"]["family"] == "baseline")
    for numbers in expected.values():
        numbers["speedup"] = (baseline["time_to_target"] / numbers["time_to_target"]
                              if baseline["time_to_target"] and numbers["time_to_target"]
                              else None)
    return expected


def row_key(row, raw):
    """The configuration a table row shows, found by its visible columns."""
    def number(text):
        return None if text in ("", "-") else float(text)
    matches = [c["key"] for c in raw["plan"]
               if c["algorithm"] == row["algorithm"] and c["workers"] == int(row["workers"])
               and (c["aggregated"] or None) == (int(number(row["aggregated"]))
                                                 if number(row["aggregated"]) else None)
               and math.isclose(c["straggler_delay"], float(row["straggler_delay"]))
               and c["train_steps"] == int(row["train_steps"])]
    assert len(matches) == 1, (row, matches)
    return matches[0]


def close(shown, value, digits):
    """A number as shown with `digits` decimals is the value rounded (or '-' for none)."""
    if value is None:
        return shown in ("", "-")
    return shown not in ("", "-") and abs(float(shown) - value) <= 0.51 * 10 ** -digits


def close_plus_minus(shown, mean, spread, digits):
    """'mean ± spread' as the Markdown shows it, or '-'."""
    if mean is None:
        return shown == "-"
    shown_mean, shown_spread = shown.split(" ± ")
    return close(shown_mean, mean, digits) and close(shown_spread, spread, digits)


# ---------------------------------------------------------------------------------------------
# Checks shared by the real and the made-up comparisons.
# ---------------------------------------------------------------------------------------------
def check_csv_against_raw(output, target):
    raw = load_raw(output)
    table = read_csv(output)
    assert table[0] == CSV_COLUMNS
    expected = expected_rows(raw, target)
    rows = [dict(zip(table[0], line)) for line in table[1:]]
    assert {(row["section"], row_key(row, raw)) for row in rows} == set(expected)
    for row in rows:
        want = expected[(row["section"], row_key(row, raw))]
        assert row["budget"] == BUDGETS[row["section"]]
        for column in ("runs_ok", "reached", "minibatches", "theta_updates"):
            assert int(row[column]) == want[column], (column, row)
        for column in ("final_accuracy", "final_accuracy_spread", "time_to_target",
                       "time_to_target_spread", "examples_per_second",
                       "examples_per_second_spread", "global_updates", "wall_seconds",
                       "speedup"):
            if want[column] is None:
                assert row[column] == "", (column, row)
            else:
                assert math.isclose(float(row[column]), want[column], rel_tol=1e-9,
                                    abs_tol=1e-9), (column, row, want[column])
    return rows


def check_markdown_against_raw(output, target):
    raw = load_raw(output)
    expected = expected_rows(raw, target)
    rows = markdown_tables(output)
    assert rows and list(rows[0]) == MARKDOWN_HEADINGS
    seen = set()
    for row in rows:
        visible = {"algorithm": row["Algorithm"], "workers": row["Workers"],
                   "aggregated": row["Aggregated N"], "straggler_delay": row["Straggler s/step"],
                   "train_steps": row["--train_steps"]}
        key = (row["Section"], row_key(visible, raw))
        seen.add(key)
        want = expected[key]
        for heading, name, digits in (("Final test accuracy", "final_accuracy", 4),
                                      ("Time to target s", "time_to_target", 2),
                                      ("Examples/s", "examples_per_second", 1)):
            assert close_plus_minus(row[heading], want[name], want[name + "_spread"], digits), (
                heading, row, want)
        assert row["Reached target"] == "%d/%d" % (want["reached"], want["runs_ok"])
        assert close(row["Global updates"], want["global_updates"], 1)
        assert close(row["Wall s"], want["wall_seconds"], 2)
        assert close(row["Speed-up vs baseline"], want["speedup"], 3)
        assert row["Minibatches"] == str(want["minibatches"])
        assert row["θ updates"] == str(want["theta_updates"])
    assert seen == set(expected)


def findings_of(output):
    markdown = open(os.path.join(output, "comparison.md")).read()
    return " ".join(markdown.split("## What we found")[1].split("\n## ")[0].split())


def section_of(markdown, title):
    """The text of one '## title' section of the report."""
    return markdown.split("## " + title + "\n")[1].split("\n## ")[0]


# ---------------------------------------------------------------------------------------------
# The real quick comparison.
# ---------------------------------------------------------------------------------------------
def test_comparison_writes_every_file_and_shows_progress(comparison):
    output, text = comparison
    for name in REAL_OUTPUTS:
        path = os.path.join(output, name)
        assert os.path.isfile(path) and os.path.getsize(path) > 0, name
        if name.endswith(".png"):
            assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n", name
    assert not os.path.exists(os.path.join(output, "straggler.png"))  # --no_straggler
    assert "[compare] run 1/4 (3 left after it)" in text, text
    assert "ETA" in text
    markdown = open(os.path.join(output, "comparison.md")).read()
    for heading in ("## What we found", "## Equal minibatches", "## Equal updates",
                    "## The budget"):
        assert heading in markdown
    assert "## With a straggler" not in markdown
    check_budgets_named(markdown)


def check_budgets_named(markdown):
    """Each table says which budget it uses."""
    assert "Budget: equal minibatches." in section_of(markdown, "Equal minibatches")
    assert "Budget: equal θ updates." in section_of(markdown, "Equal updates")
    if "## With a straggler" in markdown:
        assert "Budget: equal minibatches." in section_of(
            markdown, "With a straggler (equal minibatches)")


def test_raw_json_keeps_the_machine_settings_and_every_result_with_its_curve(comparison):
    raw = load_raw(comparison[0])
    machine = raw["settings"]["machine"]
    assert machine["cores"] == os.cpu_count()
    assert machine["python"] and machine["tensorflow"][0].isdigit()
    assert raw["settings"]["budget"] == BUDGET and raw["settings"]["target"] == TARGET
    assert len(raw["runs"]) == len(raw["plan"]) == 4
    for record in raw["runs"]:
        config = next(c for c in raw["plan"] if c["key"] == record["key"])
        assert record["ok"], record
        assert len(record["results"]) == config["workers"]
        assert all(code == 0 for code in record["exit_codes"].values())
        # Real evaluations during training (a late Hogwild worker may find the budget spent
        # and evaluate nothing, but some worker did), steps rising, inside the run.
        assert any(result["curve"] for result in record["results"]), record
        for result in record["results"]:
            steps = [step for _, step, _ in result["curve"]]
            assert steps == sorted(steps)
            assert all(record["launched"] < t <= record["ended"] for t, _, _ in result["curve"])
    # Nothing the comparison started is still running.
    for record in raw["runs"]:
        for pid in record["pids"].values():
            try:
                command = open("/proc/%d/cmdline" % pid).read()
            except (FileNotFoundError, ProcessLookupError):
                continue
            assert not any(script in command for script in (
                "ssgd.py", "Hogwild.py", "Non-Distributed_Setup.py")), (pid, command)


def test_each_budget_gives_its_train_steps_and_the_runs_spend_it(comparison):
    """Equal minibatches: Synchronous-SGD with 2 workers stops at BUDGET / 2 updates, its
    workers having computed BUDGET minibatches together; equal updates: it makes BUDGET
    updates, its workers computing 2 × BUDGET. Hogwild's run serves both budgets."""
    raw = load_raw(comparison[0])
    by_sections = {}
    for config in raw["plan"]:
        per_step = config["aggregated"] if config["algorithm"] == "Synchronous-SGD" else 1
        assert config["minibatches_per_global_step"] == per_step
        assert config["updates_per_global_step"] == 1
        steps = {"equal minibatches": math.ceil(BUDGET / per_step), "equal updates": BUDGET}
        assert {steps[section] for section in config["sections"]} == {config["train_steps"]}
        assert config["args"][config["args"].index("--train_steps") + 1] == str(
            config["train_steps"])
        by_sections[(config["algorithm"], config["train_steps"])] = config["sections"]
    assert by_sections == {
        ("Non-Distributed_Setup", BUDGET): ["equal minibatches", "equal updates"],
        ("Hogwild", BUDGET): ["equal minibatches", "equal updates"],
        ("Synchronous-SGD", BUDGET // WORKERS): ["equal minibatches"],
        ("Synchronous-SGD", BUDGET): ["equal updates"]}
    for record in raw["runs"]:
        config = next(c for c in raw["plan"] if c["key"] == record["key"])
        if config["algorithm"] == "Synchronous-SGD":
            results = record["results"]
            assert max(r["global_step"] for r in results) == config["train_steps"]
            assert sum(r["local_steps"] for r in results) == WORKERS * config["train_steps"]


def test_the_straggler_alone_gets_the_step_delay():
    """The slowed run's cluster: its last worker, and only it, sleeps --step_delay s per step
    (the cluster is built, not started)."""
    settings = {"budget": 100, "batch_size": 32, "seed": 0, "log_every": 10,
                "python": sys.executable}
    hogwild = plan.BY_NAME["Hogwild"]
    for delay, slowed in ((0.0, []), (0.05, ["worker2"])):
        config = plan.make_config(hogwild, plan.STRAGGLER_WORKERS, settings,
                                  straggler_delay=delay)
        cluster = compare.run.cluster_for(config, settings, echo=False)
        commands = {task.name: cluster.command(task) for task in cluster.tasks}
        assert sorted(commands) == ["ps0", "worker0", "worker1", "worker2"]
        assert [name for name, command in commands.items() if "--step_delay" in command] == (
            slowed)
        if slowed:
            command = commands["worker2"]
            assert command[command.index("--step_delay") + 1] == "0.05"


@pytest.mark.parametrize("algorithm, tasks", [
    ("AllReduce-SGD", ["worker0", "worker1"]), ("Gossip-SGD", ["worker0", "worker1"]),
    ("AD-PSGD", ["worker0", "worker1"]), ("Pipe-SGD", ["worker0", "worker1"]),
    ("Local-SGD", ["ps0", "worker0", "worker1"]), ("Sync-Switch", ["ps0", "worker0", "worker1"]),
    (plan.BASELINE, ["worker0"])])
def test_each_cluster_has_a_ps_only_where_its_script_has_one(algorithm, tasks):
    settings = {"budget": 100, "batch_size": 32, "seed": 0, "log_every": 10,
                "python": sys.executable}
    config = plan.make_config(plan.BY_NAME[algorithm], len(tasks) - tasks.count("ps0"),
                              settings)
    cluster = compare.run.cluster_for(config, settings, echo=False)
    assert [task.name for task in cluster.tasks] == tasks


def test_csv_columns_and_numbers_are_recomputed_from_raw_results(comparison):
    rows = check_csv_against_raw(comparison[0], TARGET)
    # The baseline is the reference of the speed-up, in both budgets' tables.
    baseline = [row for row in rows if row["family"] == "baseline"]
    assert [row["section"] for row in baseline] == ["equal minibatches", "equal updates"]
    assert all(float(row["speedup"]) == 1.0 for row in baseline)
    assert any(row["time_to_target"] for row in rows)


def test_markdown_table_shows_the_same_numbers(comparison):
    check_markdown_against_raw(comparison[0], TARGET)


def test_findings_of_one_repeat_claim_nothing(comparison):
    found = findings_of(comparison[0])
    assert "stability across repeats was not measured" in found, found
    assert "Jin et al. 2016" in found, found
    assert "At equal minibatches" in found and "At equal updates" in found, found
    assert "within noise" in found, found
    for claim in ("this agrees", "this contradicts", "in every repeat", "reached 0.60 test "
                  "accuracy first"):
        assert claim not in found, (claim, found)


def test_replot_redraws_the_same_tables_from_raw_json(comparison, tmp_path):
    output = comparison[0]
    copy = str(tmp_path / "copy")
    shutil.copytree(output, copy)
    for name in REAL_OUTPUTS:
        if name != "raw.json":
            os.remove(os.path.join(copy, name))
    code, text = run_in_process(["--replot", copy])
    assert code == 0, text
    for name in REAL_OUTPUTS:
        assert os.path.isfile(os.path.join(copy, name)), name
    assert read_csv(copy) == read_csv(output)
    assert "[compare] run" not in text  # nothing ran again


def test_resume_keeps_the_finished_runs_and_runs_only_the_missing_ones(comparison, tmp_path):
    """An interrupted comparison (Hogwild's run lost), resumed with one more algorithm: only
    Hogwild's and AGN's runs are made; the others are kept as they were."""
    copy = str(tmp_path / "copy")
    shutil.copytree(comparison[0], copy)
    raw = load_raw(copy)
    kept = [run for run in raw["runs"] if not run["key"].startswith("Hogwild|")]
    assert len(kept) == 3
    with open(os.path.join(copy, "raw.json"), "w") as out:
        json.dump(dict(raw, runs=kept), out)
    flags = ["--quick", "--workers", str(WORKERS), "--no_straggler", "--budget", str(BUDGET),
             "--batch_size", str(BATCH_SIZE), "--target", str(TARGET), "--output", copy,
             "--resume"]
    with pytest.raises(SystemExit) as refused:  # other settings: refused, nothing run
        run_in_process(flags + ["--only", "Hogwild", "--budget", str(BUDGET + 1)])
    assert refused.value.code == 2
    code, text = run_script([sys.executable, "-m", "tools.compare", "--only",
                             "Hogwild,Synchronous-SGD,AGN"] + flags, timeout=600, cwd=ROOT)
    assert code == 0, text
    assert "(3 kept from raw.json, 2 to run)" in text and "[compare] run 2/2 " in text, text
    assert "[compare] run 3/" not in text, text
    resumed = load_raw(copy)
    assert resumed["runs"][:3] == kept
    assert sorted(run["key"].split("|")[0] for run in resumed["runs"][3:]) == ["AGN", "Hogwild"]
    assert all(run["ok"] for run in resumed["runs"]) and len(resumed["plan"]) == 5
    assert "Resumed on " in open(os.path.join(copy, "comparison.md")).read()
    assert [row[2] for row in read_csv(copy)].count("AGN") == 2  # (both budgets' tables)


@pytest.mark.parametrize("flags", [["--readme"], ["--readme", "--quick", "--plan"]])
def test_readme_is_refused_without_an_emulated_comparison(flags):
    with pytest.raises(SystemExit) as refused:
        run_in_process(flags)
    assert refused.value.code == 2


def test_time_to_target_comes_from_the_curves_not_the_final_accuracy(comparison, tmp_path):
    """Cap every curve below the target: the final accuracies stay, and no run reaches the
    target any more."""
    output = comparison[0]
    copy = str(tmp_path / "capped")
    os.makedirs(copy)
    raw = load_raw(output)
    for record in raw["runs"]:
        for result in record["results"]:
            result["curve"] = [[t, step, min(accuracy, TARGET - 0.01)]
                               for t, step, accuracy in result["curve"]]
    with open(os.path.join(copy, "raw.json"), "w") as out:
        json.dump(raw, out)
    code, text = run_in_process(["--replot", copy])
    assert code == 0, text
    rows = [dict(zip(CSV_COLUMNS, line)) for line in read_csv(copy)[1:]]
    original = [dict(zip(CSV_COLUMNS, line)) for line in read_csv(output)[1:]]
    assert all(row["time_to_target"] == "" and row["reached"] == "0" for row in rows)
    assert [row["final_accuracy"] for row in rows] == [
        row["final_accuracy"] for row in original]
    assert "No configuration reached" in findings_of(copy)


# ---------------------------------------------------------------------------------------------
# The budget arithmetic, for every kind of global step.
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm, workers, minibatch_steps, update_steps", [
    ("Hogwild", 4, 100, 100),                  # one minibatch, one update per global step
    ("AGN", 4, 100, 100),                      # a commit adds its window's T minibatches
    ("Non-Distributed_Setup", 1, 100, 100),
    ("Synchronous-SGD", 1, 100, 100),          # N = 1: both budgets are the same run
    ("Synchronous-SGD", 4, 25, 100),           # 4 minibatches per update
    ("Synchronous-SGD-different-learning-rates", 3, 34, 100),  # rounded up
    ("SAGN", 2, 13, 25),                       # 2 workers × T = 4 local steps; T updates
])
def test_equal_updates_gives_synchronous_runs_n_times_the_minibatches(
        algorithm, workers, minibatch_steps, update_steps):
    settings = {"budget": 100, "batch_size": 32, "seed": 0, "log_every": 10}
    by_minibatches, by_updates = (plan.make_config(plan.BY_NAME[algorithm], workers, settings,
                                                   unit) for unit in ("minibatches", "updates"))
    assert (by_minibatches["train_steps"], by_updates["train_steps"]) == (minibatch_steps,
                                                                          update_steps)
    aggregated = workers if plan.BY_NAME[algorithm].synchronous else 1
    for config, unit in ((by_minibatches, "minibatches"), (by_updates, "updates")):
        steps = config["train_steps"]
        minibatches = steps * config["minibatches_per_global_step"]
        updates = steps * config["updates_per_global_step"]
        spent = minibatches if unit == "minibatches" else updates
        assert 100 <= spent < 100 + config[unit + "_per_global_step"]  # the budget, rounded up
        assert minibatches == updates * aggregated  # N minibatches averaged into one update
    assert (by_minibatches["key"] == by_updates["key"]) == (minibatch_steps == update_steps)


def test_the_plan_runs_each_budget_only_where_it_differs():
    """Both budgets: the synchronous configurations with N > 1 twice, the others once, in both
    tables; --no_equal_updates: each once, at equal minibatches."""
    settings = {"budget": 100, "batch_size": 32, "seed": 0, "log_every": 10, "workers": [1, 2],
                "straggler_algorithms": None, "straggler_delay": 0.05}
    algorithms = [plan.BY_NAME[name] for name in ("Non-Distributed_Setup", "Hogwild", "SAGN")]
    both = plan.build_plan(algorithms, dict(settings, sections=[plan.EQUAL_MINIBATCHES,
                                                                 plan.EQUAL_UPDATES]))
    assert [(c["algorithm"], c["workers"], c["train_steps"], c["sections"]) for c in both] == [
        ("Non-Distributed_Setup", 1, 100, ["equal minibatches", "equal updates"]),
        ("Hogwild", 1, 100, ["equal minibatches", "equal updates"]),
        ("Hogwild", 2, 100, ["equal minibatches", "equal updates"]),
        ("SAGN", 1, 25, ["equal minibatches", "equal updates"]),
        ("SAGN", 2, 13, ["equal minibatches"]),
        ("SAGN", 2, 25, ["equal updates"])]
    one = plan.build_plan(algorithms, dict(settings, sections=[plan.EQUAL_MINIBATCHES]))
    assert [(c["train_steps"], c["sections"]) for c in one] == [
        (100, ["equal minibatches"]), (100, ["equal minibatches"]), (100, ["equal minibatches"]),
        (25, ["equal minibatches"]), (13, ["equal minibatches"])]


# ---------------------------------------------------------------------------------------------
# When a difference is a finding: every repeat on one side of every other, two repeats or more.
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("first, second, expected", [
    ([1.0, 2.0], [3.0, 4.0], "<"),
    ([5.0, 6.0], [3.0, 4.0], ">"),
    ([5.0, 10.0], [6.0, 11.0], None),    # lower in each repeat, but the ranges overlap
    ([8.0, 8.0], [12.0, 7.5], None),     # lower on average, higher in one repeat
    ([1.0], [9.0], None),                # one repeat: nothing says where a second would land
    ([], [1.0, 2.0], None),
])
def test_a_difference_counts_only_when_the_ranges_over_repeats_do_not_overlap(
        first, second, expected):
    assert metrics.order(first, second) == expected


# ---------------------------------------------------------------------------------------------
# Made-up comparisons: the plan from --plan, runs with chosen numbers, the report from --replot.
# ---------------------------------------------------------------------------------------------
SYNTHETIC_TARGET = 0.9
SYNTHETIC_BUDGET = 100

# (algorithm, workers, aggregated, straggler?, --train_steps) → (seconds to target,
# examples/s, accuracy spread between the two repeats); a pair of numbers is one per repeat.
# "papers": the literature holds; "contradicted": it does not; "noisy": every range overlaps;
# "flipped": as "papers", but Synchronous-SGD with 2 workers beats Hogwild in one repeat.
PAPERS = {
    ("Non-Distributed_Setup", 1, None, False, 100): (20.0, 1000.0, 0.001),
    ("Hogwild", 2, None, False, 100): (8.0, 1500.0, 0.010),
    ("Hogwild", 4, None, False, 100): (7.0, 1600.0, 0.030),
    ("Synchronous-SGD", 2, 2, False, 50): (12.0, 1200.0, 0.005),
    ("Synchronous-SGD", 4, 4, False, 25): (6.0, 2400.0, 0.002),
    ("Synchronous-SGD", 2, 2, False, 100): (10.0, 1300.0, 0.005),
    ("Synchronous-SGD", 4, 4, False, 100): (5.0, 2500.0, 0.002),
    ("Hogwild", 3, None, False, 100): (8.0, 1500.0, 0.010),
    ("Hogwild", 3, None, True, 100): (9.0, 1400.0, 0.010),
    ("Synchronous-SGD", 3, 3, False, 34): (9.0, 1800.0, 0.004),
    ("Synchronous-SGD", 3, 3, True, 34): (27.0, 600.0, 0.004),
    ("Synchronous-SGD", 3, 2, False, 50): (10.0, 1700.0, 0.004),
    ("Synchronous-SGD", 3, 2, True, 50): (11.0, 1600.0, 0.004),
}
SCENARIOS = {
    "papers": PAPERS,
    "contradicted": {
        ("Non-Distributed_Setup", 1, None, False, 100): (5.0, 3000.0, 0.001),
        ("Hogwild", 2, None, False, 100): (14.0, 1500.0, 0.010),
        ("Hogwild", 4, None, False, 100): (9.0, 2900.0, 0.030),
        ("Synchronous-SGD", 2, 2, False, 50): (9.0, 1200.0, 0.005),
        ("Synchronous-SGD", 4, 4, False, 25): (8.0, 1250.0, 0.002),
        ("Synchronous-SGD", 2, 2, False, 100): (10.0, 1200.0, 0.005),
        ("Synchronous-SGD", 4, 4, False, 100): (9.5, 1250.0, 0.002),
        ("Hogwild", 3, None, False, 100): (8.0, 1500.0, 0.010),
        ("Hogwild", 3, None, True, 100): (24.0, 500.0, 0.010),
        ("Synchronous-SGD", 3, 3, False, 34): (9.0, 1800.0, 0.004),
        ("Synchronous-SGD", 3, 3, True, 34): (20.0, 800.0, 0.004),
        ("Synchronous-SGD", 3, 2, False, 50): (10.0, 1700.0, 0.004),
        ("Synchronous-SGD", 3, 2, True, 50): (30.0, 700.0, 0.004),
    },
    "noisy": {key: ((5.0 + 0.1 * index, 15.0 - 0.1 * index),
                    (1000.0 + 10 * index, 3000.0 - 10 * index), 0.01)
              for index, key in enumerate(sorted(PAPERS, key=str))},
    "flipped": {**PAPERS, ("Synchronous-SGD", 2, 2, False, 50): ((12.0, 7.5), 1200.0, 0.005),
                ("Synchronous-SGD", 2, 2, False, 100): ((10.0, 7.5), 1300.0, 0.005)},
}


def of_repeat(value, repeat):
    return value[repeat] if isinstance(value, tuple) else value


def made_up_run(config, repeat, launched, seconds_to_target, examples_per_second, spread):
    """One run's raw record: worker 0 reaches the target exactly seconds_to_target after
    launch and has the most updates; the workers' rates add up to examples_per_second."""
    seconds_to_target = of_repeat(seconds_to_target, repeat)
    examples_per_second = of_repeat(examples_per_second, repeat)
    workers, accuracy = config["workers"], 0.95 + spread * repeat
    results = []
    for index in range(workers):
        late = index * 1.0  # the other workers' evaluations come later
        curve = [[launched + seconds_to_target * 0.5 + late, 10, SYNTHETIC_TARGET - 0.2],
                 [launched + seconds_to_target + late, 20, SYNTHETIC_TARGET + 0.01],
                 [launched + seconds_to_target + 2 + late, 30, accuracy - 0.01 * index]]
        results.append({
            "algorithm": config["algorithm"], "job": "worker", "task_index": index,
            "workers": workers, "global_step": config["train_steps"] - index,
            "first_global_step": 0, "local_steps": 100, "train_loss": 0.1,
            "test_accuracy": accuracy - 0.01 * index,
            "wall_seconds": 100.0 * BATCH_SIZE * workers / examples_per_second,
            "steps_per_second": None, "curve": curve})
    return {"key": config["key"], "repeat": repeat, "launched": launched,
            "ended": launched + seconds_to_target + 5.0, "ok": True, "results": results,
            "exit_codes": {}, "pids": {}}


def scenario_key(config):
    return (config["algorithm"], config["workers"], config["aggregated"],
            bool(config["straggler_delay"]), config["train_steps"])


@pytest.fixture(scope="module")
def made_up_plan(tmp_path_factory):
    """raw.json as --plan writes it for the made-up comparisons: the plan, no runs."""
    output = str(tmp_path_factory.mktemp("plan"))
    code, text = run_in_process(
        ["--plan", "--only", "Hogwild,Synchronous-SGD", "--workers", "2,4", "--repeats", "2",
         "--budget", str(SYNTHETIC_BUDGET), "--batch_size", str(BATCH_SIZE),
         "--target", str(SYNTHETIC_TARGET), "--output", output])
    assert code == 0, text
    assert "[compare] run" not in text  # --plan runs nothing
    raw = load_raw(output)
    assert raw["runs"] == []
    return raw


def made_up_raw(planned, scenario):
    """raw.json's content: the plan, and two repeats of every configuration with the
    scenario's numbers."""
    raw = json.loads(json.dumps(planned))
    numbers = SCENARIOS[scenario]
    assert {scenario_key(config) for config in raw["plan"]} == set(numbers)
    launched = 1.7e9
    for repeat in range(2):
        for config in raw["plan"]:
            launched += 100.0
            raw["runs"].append(made_up_run(config, repeat, launched,
                                           *numbers[scenario_key(config)]))
    return raw


@pytest.fixture(scope="module", params=["papers", "contradicted", "noisy"])
def made_up(request, made_up_plan, tmp_path_factory):
    """(output folder, scenario name) of a made-up comparison with two repeats, reported by
    --replot."""
    output = str(tmp_path_factory.mktemp(request.param))
    raw = made_up_raw(made_up_plan, request.param)
    with open(os.path.join(output, "raw.json"), "w") as out:
        json.dump(raw, out)
    code, text = run_in_process(["--replot", output])
    assert code == 0, text
    return output, request.param


def test_made_up_tables_are_the_numbers_of_their_runs(made_up):
    output, scenario = made_up
    for name in OUTPUTS:
        assert os.path.isfile(os.path.join(output, name)), name
    rows = check_csv_against_raw(output, SYNTHETIC_TARGET)
    check_markdown_against_raw(output, SYNTHETIC_TARGET)
    # Time to target is exactly what the curves say (chosen above), per configuration.
    hogwild = next(row for row in rows if row["algorithm"] == "Hogwild"
                   and row["workers"] == "2")
    chosen = SCENARIOS[scenario][("Hogwild", 2, None, False, 100)][0]
    assert math.isclose(float(hogwild["time_to_target"]), statistics.mean(
        chosen if isinstance(chosen, tuple) else [chosen]))
    markdown = open(os.path.join(output, "comparison.md")).read()
    check_budgets_named(markdown)
    assert "| Synchronous-SGD (N=2 of 3) | synchronous |" in markdown  # the straggler costs
    # The synchronous rows of each budget's table: N× fewer updates, or N× more minibatches.
    for row in rows:
        if row["family"] == "synchronous" and row["section"] != "straggler":
            updates, minibatches = int(row["theta_updates"]), int(row["minibatches"])
            assert minibatches == int(row["workers"]) * updates
            assert {"equal minibatches": minibatches, "equal updates": updates}[
                row["section"]] == SYNTHETIC_BUDGET


CLAIMS = ("Jin et al. 2016", "the claim that synchronous training scales further",
          "Chen et al. 2016", "the folklore")


def times_claimed(found, verdict, claim):
    """How often the findings weigh a claim so: Jin et al. once per budget, the others once."""
    return found.count(verdict + claim) == (2 if claim.startswith("Jin") else 1)


def papers_hold(found):
    for sentence in (
            "Synchronous-SGD with 4 workers reached 0.90 test accuracy first, after 6.0 s "
            "(6.0–6.0 over 2 repeats); the next, Hogwild with 4 workers, after 7.0 s",
            "Synchronous-SGD with 4 workers reached 0.90 test accuracy first, after 5.0 s",
            "The fastest distributed configuration to the target, Synchronous-SGD with 4 "
            "workers, took 6.0 s (6.0–6.0 over 2 repeats) against 20.0 s (20.0–20.0 over 2 "
            "repeats) for the one process: faster in every repeat; speed-up ×3.33",
            "grew ×2.00 (2.00–2.00 over 2 repeats), the best asynchronous ×1.07",
            "the widest that of Hogwild with 4 workers, 0.9650 (0.9500–0.9800 over 2 repeats)",
            "Hogwild ×1.12 (1.12–1.12 over 2 repeats), slower in every repeat",
            "Synchronous-SGD ×3.00 (3.00–3.00 over 2 repeats), slower in every repeat"):
        assert sentence in found, (sentence, found)
    assert all(times_claimed(found, "this agrees with ", claim) for claim in CLAIMS), found
    assert "this contradicts" not in found and "neither supports" not in found, found


def papers_contradicted(found):
    assert "The one-process baseline reached 0.90 test accuracy first, after 5.0 s" in found
    assert "for the one process: slower in every repeat" in found, found
    assert all(times_claimed(found, "this contradicts ", claim) for claim in CLAIMS), found
    assert "this agrees with" not in found and "neither supports" not in found, found


def all_within_noise(found):
    """Every range overlaps another: no claim, every comparison said to be within noise."""
    assert "were first to 0.90 test accuracy, within noise of each other" in found, found
    assert all(times_claimed(found, "is within noise, so neither supports nor contradicts ",
                             claim) for claim in CLAIMS), found
    for claim in ("this agrees", "this contradicts", "in every repeat", "first, after"):
        assert claim not in found, (claim, found)


def one_repeat_flipped(found):
    """Hogwild is faster on average at 2 workers, but Synchronous-SGD was in repeat 2: no
    claim on Jin et al. at either budget; the other claims still hold."""
    assert found.count("this is within noise, so neither supports nor contradicts Jin et al. "
                       "2016") == 2, found
    assert ("took 8.0 s (8.0–8.0 over 2 repeats) against 9.8 s (7.5–12.0 over 2 repeats)"
            in found), found
    assert "this agrees with Chen et al. 2016" in found, found


def test_made_up_findings_follow_the_numbers(made_up):
    output, scenario = made_up
    check = {"papers": papers_hold, "contradicted": papers_contradicted,
             "noisy": all_within_noise}[scenario]
    check(findings_of(output))


def test_a_finding_is_claimed_only_when_it_holds_in_every_repeat(made_up_plan):
    """The findings of "flipped", computed from its rows in this process (no files)."""
    raw = made_up_raw(made_up_plan, "flipped")
    rows = metrics.summarize(raw, SYNTHETIC_TARGET)
    one_repeat_flipped(" ".join(findings.findings(rows, raw["settings"], raw["runs"]).split()))


def axis_measures(target):
    """{axis label: measure}: every value axis must carry exactly one of these."""
    return {label: measure for measure, label in plots.axis_labels(target).items()}


def plotted_values(ax):
    """Every y value an axis draws: its lines' points and its bars' heights."""
    points = [y for line in ax.get_lines() for y in line.get_ydata()]
    return points + [patch.get_height() for patch in ax.patches]


def test_every_chart_axis_shows_one_measure(made_up_plan):
    """Each value axis is labelled with one measure and draws only that measure's numbers
    (the means of the rows, or the accuracies of the curves and the target); the straggler's
    time to target and time to finish the budget get a panel each. On "noisy", whose repeats
    differ, so that the error bars are real."""
    raw = made_up_raw(made_up_plan, "noisy")
    rows = metrics.summarize(raw, SYNTHETIC_TARGET)
    measures = axis_measures(SYNTHETIC_TARGET)
    curve_values = {point[2] for record in raw["runs"] for result in record["results"]
                    for point in result["curve"]} | {SYNTHETIC_TARGET}
    figures = plots.figures(raw, rows)
    assert sorted(figures) == sorted(name for name in OUTPUTS if name.endswith(".png"))
    for name, figure in figures.items():
        shown = set()
        for ax in figure.axes:
            assert ax.get_ylabel() in measures, (name, ax.get_ylabel())
            assert ax.get_xlabel() in ("", plots.CURVE_TIME, "workers"), (name, ax.get_xlabel())
            measure = measures[ax.get_ylabel()]
            shown.add(measure)
            allowed = (curve_values if measure == "test_accuracy"
                       else {row[measure] for row in rows if row[measure] is not None})
            for value in plotted_values(ax):
                assert any(math.isclose(value, a, rel_tol=1e-9) for a in allowed), (
                    name, measure, value)
        if name == "straggler.png":
            assert shown == {"test_accuracy", "time_to_target", "wall_seconds"}
        if name == "scaling.png":
            assert shown == {"examples_per_second", "time_to_target"}


def test_hogwild_is_compared_with_and_without_the_lock():
    """The contrast that shows what Hogwild is: the same script, with and without the lock."""
    settings = {"budget": 1000, "batch_size": 32, "seed": 0, "log_every": 100}
    free, locked = (plan.make_config(plan.BY_NAME[name], 2, settings)
                    for name in ("Hogwild", "Hogwild-locked"))
    assert free["script"] == locked["script"] == "Hogwild/Hogwild.py"
    assert free["key"] != locked["key"]
    assert "--use_locking" in locked["args"] and "--use_locking" not in free["args"]


def jin_row(algorithm, workers, times):
    """A summarized row of the equal-minibatches table with these times to target (None: a
    repeat that did not reach it)."""
    reached = [time for time in times if time is not None]
    return {"section": plan.EQUAL_MINIBATCHES, "algorithm": algorithm, "workers": workers,
            "aggregated": workers if plan.BY_NAME[algorithm].synchronous else None,
            "jin_family": plan.BY_NAME[algorithm].jin, "runs_ok": len(times),
            "time_to_target": statistics.mean(reached) if reached else None,
            "per_repeat": {"time_to_target": list(times)}}


JIN_SETTINGS = {"target": 0.95, "machine": {"cores": 2}}


@pytest.mark.parametrize("elastic_at_2, verdict", [
    ((5.0, 5.2), "agrees with Jin et al."),
    ((7.0, 7.5), "contradicts Jin et al."),
    ((5.0, 6.5), "is within noise, so neither supports nor contradicts Jin et al.")])
def test_jin_section_names_the_first_family_at_each_worker_count(elastic_at_2, verdict):
    """Made-up rows: each family's fastest example per worker count, the first family and its
    margin over the next, and the verdict on Jin et al. at the fewest workers (2), from the
    faster of elastic averaging and gossip against synchronous all-reduce."""
    rows = [jin_row("AEASGD", 2, elastic_at_2), jin_row("EAMSGD", 2, (9.0, 9.5)),
            jin_row("AllReduce-SGD", 2, (6.0, 6.4)), jin_row("Gossip-SGD", 2, (8.0, 8.5)),
            jin_row("AEASGD", 4, (6.0, 6.2)), jin_row("AllReduce-SGD", 4, (4.0, 4.1)),
            jin_row("Gossip-SGD", 4, (5.0, None)), jin_row("Hogwild", 4, (5.5, 7.0))]
    text = " ".join(findings.jin_question(rows, JIN_SETTINGS).split())
    elastic = "AEASGD: %.1f s (%.1f–%.1f over 2 repeats)" % (
        statistics.mean(elastic_at_2), min(elastic_at_2), max(elastic_at_2))
    # The table: one row per family that ran, the faster elastic example shown, gossip at 4
    # workers not reached in every run.
    assert "| elastic averaging | %s | AEASGD: 6.1 s (6.0–6.2 over 2 repeats) |" % elastic in text
    assert "| gossip | Gossip-SGD: 8.2 s (8.0–8.5 over 2 repeats) | — |" in text, text
    assert "| asynchronous ps | — | Hogwild: 6.2 s (5.5–7.0 over 2 repeats) |" in text, text
    assert "EAMSGD" not in text
    assert ("At 4 workers synchronous all-reduce was first to 0.95 (AllReduce-SGD, 4.0 s "
            "(4.0–4.1 over 2 repeats)); the next, elastic averaging (AEASGD, 6.1 s (6.0–6.2 over "
            "2 repeats)), was slower in every repeat.") in text, text
    assert ("At 2 workers the faster of elastic averaging and gossip, AEASGD, took %s against "
            "6.2 s (6.0–6.4 over 2 repeats) for synchronous all-reduce (AllReduce-SGD): this %s"
            % (elastic[len("AEASGD: "):], verdict)) in text, text
    assert "2 core(s) run every task" in text


COMMITTED = os.path.join(ROOT, "results", "comparison")


def test_the_readme_shows_the_committed_comparison_as_its_raw_results_say():
    """results/comparison/ is a real run, committed: its report is what --replot makes of its
    raw.json, and the README's section on Jin et al.'s question, its machine line and its plots
    are that report's, not numbers typed in."""
    raw = load_raw(COMMITTED)
    assert raw["runs"] and all(run["ok"] for run in raw["runs"]), "a run of it failed"
    settings = raw["settings"]
    rows = metrics.summarize(raw, settings["target"])
    readme = " ".join(open(os.path.join(ROOT, "README.md")).read().split())
    for line in findings.jin_question(rows, settings).splitlines():
        assert " ".join(line.split()) in readme, line
    machine = settings["machine"]
    assert "%d core(s), %s" % (machine["cores"], machine["platform"]) in readme
    assert machine["date"] in readme and settings["command"] in readme
    for plot in (compare.ACCURACY_PLOT, compare.SCALING_PLOT):
        assert os.path.isfile(os.path.join(COMMITTED, plot)), plot
        assert "(results/comparison/%s)" % plot in readme, plot
    report = open(os.path.join(COMMITTED, compare.MARKDOWN_FILE)).read()
    assert findings.jin_question(rows, settings) in report
