"""tools/compare.py: one command runs the algorithms on the same budget and writes the measured
answer to "synchronous or asynchronous?" (tables, plots, findings, raw results).

One real quick comparison runs once for the whole module, on two algorithms with tiny budgets
and one worker count, 3, so that the straggler section's reference run doubles as a scaling row:
the baseline, Hogwild and Synchronous-SGD with 3 workers, and Hogwild with a straggler (4 runs,
about a minute on 2 busy cores). Every number of its tables is recomputed here from raw.json,
independently of the tool's code. The findings' conditions, and the straggler section with its
backup worker, are tested on raw.json files made here with chosen numbers: `--plan` writes the
plan, the test fills in the runs, `--replot` writes the report. Nothing asserts on timing.
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

import compare  # tools/compare.py (helpers put tools/ on the path)

# matplotlib 3.9 calls pyparsing names that pyparsing 3.2 deprecates: not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:'.*' deprecated - use '.*'")

COMPARE = os.path.join(ROOT, "tools", "compare.py")
TARGET = 0.6
BUDGET = 60
BATCH_SIZE = 32
CSV_COLUMNS = ["section", "algorithm", "family", "workers", "aggregated", "straggler_delay",
               "runs_ok", "train_steps", "final_accuracy_mean", "final_accuracy_spread",
               "time_to_target", "reached", "examples_per_second", "global_updates",
               "wall_seconds", "speedup"]
MARKDOWN_HEADINGS = ["Section", "Algorithm", "Family", "Workers", "Aggregated N",
                     "Straggler s/step", "Runs ok", "--train_steps", "Final test accuracy",
                     "Time to target s", "Reached target", "Examples/s", "Global updates",
                     "Wall s", "Speed-up vs baseline"]
OUTPUTS = ["comparison.md", "comparison.csv", "raw.json", "accuracy_vs_time.png", "scaling.png",
           "straggler.png"]


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    """(output folder, console text) of one quick comparison."""
    output = str(tmp_path_factory.mktemp("comparison"))
    code, text = run_script(
        [sys.executable, COMPARE, "--quick", "--only", "Hogwild,Synchronous-SGD",
         "--workers", "3", "--straggler_algorithms", "Hogwild",
         "--budget", str(BUDGET), "--batch_size", str(BATCH_SIZE), "--target", str(TARGET),
         "--straggler_delay", "0.02", "--output", output],
        timeout=900)
    assert code == 0, text
    return output, text


def run_in_process(args):
    """compare.py's main() here, for --plan and --replot (nothing to isolate, and no second
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
def expected_rows(raw, target):
    """{(section, key): expected numbers}, by the definitions in the tool's docstring."""
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
        numbers = {
            "final_accuracy_mean": sum(accuracies) / len(accuracies) if accuracies else None,
            "final_accuracy_spread": (statistics.stdev(accuracies) if len(accuracies) > 1
                                      else 0.0 if accuracies else None),
            "time_to_target": sum(times) / len(times) if times else None,
            "reached": len(times), "runs_ok": len(records),
            "examples_per_second": sum(throughputs) / len(throughputs) if throughputs else None,
            "global_updates": sum(updates) / len(updates) if updates else None,
            "wall_seconds": sum(walls) / len(walls) if walls else None}
        for section in config["sections"]:
            expected[(section, config["key"])] = dict(numbers, config=config)
    baseline = next(numbers for (section, _), numbers in expected.items()
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
               and math.isclose(c["straggler_delay"], float(row["straggler_delay"]))]
    assert len(matches) == 1, (row, matches)
    return matches[0]


def close(shown, value, digits):
    """A number as shown with `digits` decimals is the value rounded (or '-' for none)."""
    if value is None:
        return shown in ("", "-")
    return shown not in ("", "-") and abs(float(shown) - value) <= 0.51 * 10 ** -digits


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
        assert int(row["runs_ok"]) == want["runs_ok"] and int(row["reached"]) == want["reached"]
        assert int(row["train_steps"]) == want["config"]["train_steps"]
        for column in ("final_accuracy_mean", "final_accuracy_spread", "time_to_target",
                       "examples_per_second", "global_updates", "wall_seconds", "speedup"):
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
                   "aggregated": row["Aggregated N"], "straggler_delay": row["Straggler s/step"]}
        key = (row["Section"], row_key(visible, raw))
        seen.add(key)
        want = expected[key]
        if want["final_accuracy_mean"] is None:
            assert row["Final test accuracy"] == "-"
        else:
            accuracy, spread = row["Final test accuracy"].split(" ± ")
            assert close(accuracy, want["final_accuracy_mean"], 4)
            assert close(spread, want["final_accuracy_spread"], 4)
        assert close(row["Time to target s"], want["time_to_target"], 2)
        assert row["Reached target"] == "%d/%d" % (want["reached"], want["runs_ok"])
        assert close(row["Examples/s"], want["examples_per_second"], 1)
        assert close(row["Global updates"], want["global_updates"], 1)
        assert close(row["Wall s"], want["wall_seconds"], 2)
        assert close(row["Speed-up vs baseline"], want["speedup"], 3)
        assert row["--train_steps"] == str(want["config"]["train_steps"])
    assert seen == set(expected)


def findings_of(output):
    markdown = open(os.path.join(output, "comparison.md")).read()
    return " ".join(markdown.split("## What we found")[1].split("\n## ")[0].split())


# ---------------------------------------------------------------------------------------------
# The real quick comparison.
# ---------------------------------------------------------------------------------------------
def test_comparison_writes_every_file_and_shows_progress(comparison):
    output, text = comparison
    for name in OUTPUTS:
        path = os.path.join(output, name)
        assert os.path.isfile(path) and os.path.getsize(path) > 0, name
        if name.endswith(".png"):
            assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n", name
    assert "[compare] run 1/4 (3 left after it)" in text, text
    assert "ETA" in text
    markdown = open(os.path.join(output, "comparison.md")).read()
    for heading in ("## What we found", "## Without a straggler", "## With a straggler",
                    "## The budget"):
        assert heading in markdown


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


def test_same_budget_in_minibatches_for_every_algorithm(comparison):
    raw = load_raw(comparison[0])
    for config in raw["plan"]:
        per_step = config["aggregated"] if config["algorithm"] == "Synchronous-SGD" else 1
        assert config["minibatches_per_global_step"] == per_step
        assert config["train_steps"] == math.ceil(BUDGET / per_step)
        assert config["args"][config["args"].index("--train_steps") + 1] == str(
            config["train_steps"])
    straggling = [c for c in raw["plan"] if c["straggler_delay"]]
    assert [(c["algorithm"], c["aggregated"]) for c in straggling] == [("Hogwild", None)]
    assert all(c["straggler_task"] == "worker2" and c["workers"] == 3 for c in straggling)


def test_csv_columns_and_numbers_are_recomputed_from_raw_results(comparison):
    rows = check_csv_against_raw(comparison[0], TARGET)
    # The baseline is the reference of the speed-up; something reached the low target.
    baseline = [row for row in rows if row["family"] == "baseline"]
    assert len(baseline) == 1 and float(baseline[0]["speedup"]) == 1.0
    assert any(row["time_to_target"] for row in rows)


def test_markdown_table_shows_the_same_numbers(comparison):
    check_markdown_against_raw(comparison[0], TARGET)


def test_findings_name_the_first_to_the_target(comparison):
    found = findings_of(comparison[0])
    assert "reached %.2f test accuracy first" % TARGET in found, found
    assert "stability across repeats was not measured" in found, found  # one repeat
    assert "Jin et al. 2016" in found, found


def test_replot_redraws_the_same_tables_from_raw_json(comparison, tmp_path):
    output = comparison[0]
    copy = str(tmp_path / "copy")
    shutil.copytree(output, copy)
    for name in OUTPUTS:
        if name != "raw.json":
            os.remove(os.path.join(copy, name))
    code, text = run_in_process(["--replot", copy])
    assert code == 0, text
    for name in OUTPUTS:
        assert os.path.isfile(os.path.join(copy, name)), name
    assert read_csv(copy) == read_csv(output)
    assert "[compare] run" not in text  # nothing ran again


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
    assert [row["final_accuracy_mean"] for row in rows] == [
        row["final_accuracy_mean"] for row in original]
    assert "No configuration reached" in findings_of(copy)


# ---------------------------------------------------------------------------------------------
# Made-up comparisons: the plan from --plan, runs with chosen numbers, the report from --replot.
# ---------------------------------------------------------------------------------------------
SYNTHETIC_TARGET = 0.9

# (algorithm, workers, aggregated, straggler?) → (seconds to target, examples/s, accuracy
# spread between the two repeats). "papers": the literature holds; "contradicted": it does not.
SCENARIOS = {
    "papers": {
        ("Non-Distributed_Setup", 1, None, False): (20.0, 1000.0, 0.001),
        ("Hogwild", 2, None, False): (8.0, 1500.0, 0.010),
        ("Hogwild", 4, None, False): (7.0, 1600.0, 0.030),
        ("Synchronous-SGD", 2, 2, False): (12.0, 1200.0, 0.005),
        ("Synchronous-SGD", 4, 4, False): (6.0, 2400.0, 0.002),
        ("Hogwild", 3, None, False): (8.0, 1500.0, 0.010),
        ("Hogwild", 3, None, True): (9.0, 1400.0, 0.010),
        ("Synchronous-SGD", 3, 3, False): (9.0, 1800.0, 0.004),
        ("Synchronous-SGD", 3, 3, True): (27.0, 600.0, 0.004),
        ("Synchronous-SGD", 3, 2, False): (10.0, 1700.0, 0.004),
        ("Synchronous-SGD", 3, 2, True): (11.0, 1600.0, 0.004),
    },
    "contradicted": {
        ("Non-Distributed_Setup", 1, None, False): (5.0, 3000.0, 0.001),
        ("Hogwild", 2, None, False): (14.0, 1500.0, 0.010),
        ("Hogwild", 4, None, False): (9.0, 2900.0, 0.030),
        ("Synchronous-SGD", 2, 2, False): (9.0, 1200.0, 0.005),
        ("Synchronous-SGD", 4, 4, False): (8.0, 1250.0, 0.002),
        ("Hogwild", 3, None, False): (8.0, 1500.0, 0.010),
        ("Hogwild", 3, None, True): (24.0, 500.0, 0.010),
        ("Synchronous-SGD", 3, 3, False): (9.0, 1800.0, 0.004),
        ("Synchronous-SGD", 3, 3, True): (20.0, 800.0, 0.004),
        ("Synchronous-SGD", 3, 2, False): (10.0, 1700.0, 0.004),
        ("Synchronous-SGD", 3, 2, True): (30.0, 700.0, 0.004),
    },
}


def made_up_run(config, repeat, launched, seconds_to_target, examples_per_second, spread):
    """One run's raw record: worker 0 reaches the target exactly seconds_to_target after
    launch and has the most updates; the workers' rates add up to examples_per_second."""
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


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def made_up(request, tmp_path_factory):
    """(output folder, scenario name) of a made-up comparison with two repeats."""
    output = str(tmp_path_factory.mktemp(request.param))
    code, text = run_in_process(
        ["--plan", "--only", "Hogwild,Synchronous-SGD", "--workers", "2,4", "--repeats", "2",
         "--budget", "100", "--batch_size", str(BATCH_SIZE), "--target", str(SYNTHETIC_TARGET),
         "--output", output])
    assert code == 0, text
    assert "[compare] run" not in text  # --plan runs nothing
    raw = load_raw(output)
    assert raw["runs"] == []
    numbers = SCENARIOS[request.param]
    assert {(c["algorithm"], c["workers"], c["aggregated"], bool(c["straggler_delay"]))
            for c in raw["plan"]} == set(numbers)
    launched = 1.7e9
    for repeat in range(2):
        for config in raw["plan"]:
            launched += 100.0
            raw["runs"].append(made_up_run(config, repeat, launched, *numbers[(
                config["algorithm"], config["workers"], config["aggregated"],
                bool(config["straggler_delay"]))]))
    with open(os.path.join(output, "raw.json"), "w") as out:
        json.dump(raw, out)
    code, text = run_in_process(["--replot", output])
    assert code == 0, text
    return output, request.param


def test_made_up_tables_are_the_numbers_of_their_runs(made_up):
    output, _ = made_up
    for name in OUTPUTS:
        assert os.path.isfile(os.path.join(output, name)), name
    rows = check_csv_against_raw(output, SYNTHETIC_TARGET)
    check_markdown_against_raw(output, SYNTHETIC_TARGET)
    # Time to target is exactly what the curves say (chosen above), per configuration.
    hogwild = next(row for row in rows if row["algorithm"] == "Hogwild"
                   and row["workers"] == "2")
    assert math.isclose(float(hogwild["time_to_target"]),
                        SCENARIOS[made_up[1]][("Hogwild", 2, None, False)][0])
    markdown = open(os.path.join(output, "comparison.md")).read()
    assert "| Synchronous-SGD (N=2 of 3) | synchronous |" in markdown  # the straggler costs


def test_made_up_findings_follow_the_numbers(made_up):
    output, scenario = made_up
    found = findings_of(output)
    if scenario == "papers":
        assert ("Synchronous-SGD with 4 worker(s) reached 0.90 test accuracy first, 6.0 s after "
                "launch (the one-process baseline: 20.0 s)") in found, found
        assert "4 of 4 distributed configurations beat the single process" in found, found
        assert "most stable final accuracy was Synchronous-SGD's with 4 worker(s)" in found
        assert "the least stable Hogwild's with 4" in found, found
        assert "this agrees with Jin et al. 2016" in found, found
        assert "this agrees with the claim that synchronous training scales further" in found
        assert "this agrees with Chen et al. 2016" in found, found
        assert "this agrees with the folklore" in found, found
        assert ("With the straggler, Hogwild was fastest (9.0 s to reach the target) and "
                "Synchronous-SGD slowest (27.0 s to reach the target)") in found, found
        assert "contradicts" not in found, found
    else:
        assert ("The one-process baseline reached 0.90 test accuracy first, 5.0 s after "
                "launch") in found, found
        assert "No distributed configuration beat the single process" in found, found
        assert "this contradicts Jin et al. 2016" in found, found
        assert "this contradicts the claim that synchronous training scales further" in found
        assert "this contradicts Chen et al. 2016" in found, found
        assert "this contradicts the folklore" in found, found
        assert "agrees with" not in found, found
