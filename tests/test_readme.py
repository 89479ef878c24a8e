"""The README, the docs and the folder READMEs name only paths and headings that exist, the
README stays a front door, and the results it shows are the benchmark's."""
import glob
import json
import os
import re
import sys
import unicodedata

import pytest

from helpers import ROOT

import benchmark
import compare

# Files the project's tools write when run (named in the READMEs, not part of the repository).
TOOL_OUTPUTS = {compare.RAW_FILE, compare.MARKDOWN_FILE, compare.CSV_FILE, compare.ACCURACY_PLOT,
                compare.SCALING_PLOT, compare.STRAGGLER_PLOT}
# Pages that are being written beside this one; a link to one may stand before the page exists,
# and is checked like any other once it does.
BEING_WRITTEN = set()

README = os.path.join(ROOT, "README.md")
READMES = sorted(glob.glob(README) + glob.glob(os.path.join(ROOT, "*", "README.md"))
                 + glob.glob(os.path.join(ROOT, "docs", "*.md")))
LINK = re.compile(r"\]\(([^)#\s]+)")
CODE_PATH = re.compile(r"`([\w./-]+\.(?:py|sh|ipynb|txt|json|md))`")
ANCHOR_LINK = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)
MAX_README_LINES = 350


def named_paths(readme):
    text = open(readme).read()
    links = [link for link in LINK.findall(text) if "://" not in link]
    return links, CODE_PATH.findall(text)


def being_written(path):
    return os.path.relpath(os.path.normpath(path), ROOT) in BEING_WRITTEN


@pytest.mark.parametrize("readme", READMES, ids=lambda path: os.path.relpath(path, ROOT))
def test_every_path_a_readme_names_exists(readme):
    folder = os.path.dirname(readme)
    links, code_paths = named_paths(readme)
    missing = [link for link in links if not os.path.exists(os.path.join(folder, link))
               and not being_written(os.path.join(folder, link))]
    # A file named in code may be relative to the README's folder or to the repository root,
    # or be a file inside the folder named by the example's own README.
    missing += [path for path in code_paths if path not in TOOL_OUTPUTS
                and not any(os.path.exists(os.path.join(base, path))
                           for base in (folder, ROOT))
                and not glob.glob(os.path.join(ROOT, "*", path))
                and not being_written(os.path.join(ROOT, path))]
    assert missing == []


def slug(heading):
    """The anchor GitHub gives a heading: its text without Markdown, lower case, punctuation
    and symbols dropped, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    kept = "".join(c for c in text if c in " -" or unicodedata.category(c)[0] in "LNM"
                   or unicodedata.category(c) == "Pc")
    return kept.replace(" ", "-")


def anchors(markdown_file):
    """Every anchor of a Markdown file's headings, a repeated one numbered as GitHub does."""
    seen, found = {}, set()
    text = re.sub(r"```.*?```", "", open(markdown_file).read(), flags=re.S)
    for heading in HEADING.findall(text):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else "%s-%d" % (base, count))
    return found


def test_a_heading_slug_is_githubs():
    assert slug("K steps per session.run (`--steps_per_run`)") == (
        "k-steps-per-sessionrun---steps_per_run")
    assert slug("Backup workers: what they buy") == "backup-workers-what-they-buy"
    assert slug("θ on the ps, × 2 → [AGN](AGN/)") == "θ-on-the-ps--2--agn"


@pytest.mark.parametrize("readme", READMES, ids=lambda path: os.path.relpath(path, ROOT))
def test_every_heading_a_link_names_exists(readme):
    """A link to a section (`file.md#section`, or `#section` in the same file) lands on a
    heading of that file: moving a section to docs/ must not leave a link behind."""
    folder = os.path.dirname(readme)
    missing = []
    for target, fragment in ANCHOR_LINK.findall(open(readme).read()):
        if "://" in target or target and not target.endswith(".md"):
            continue
        path = os.path.normpath(os.path.join(folder, target)) if target else readme
        if not os.path.exists(path) and being_written(path):
            continue
        if fragment not in anchors(path):
            missing.append("%s#%s" % (target, fragment))
    assert missing == []


def test_the_readme_is_a_front_door():
    """At most 350 lines; the reference lives in docs/ and tests/README.md."""
    lines = open(README).read().count("\n")
    assert lines <= MAX_README_LINES, "README.md has %d lines" % lines


def test_the_readme_keeps_the_set_up_and_quick_start_commands():
    commands = [line.split("#")[0].strip() for line in open(README) if line.startswith("    ")]
    for command in ("bash setup.sh", "bash setup.sh test", "cd Hogwild && bash run.sh",
                    "WORKERS=4 bash run.sh --train_steps 4000",
                    "PYTHON=../.venv-tf2/bin/python bash run.sh"):
        assert command in commands, command
    assert os.path.isfile(os.path.join(ROOT, "Hogwild", "run.sh"))


@pytest.mark.parametrize("readme", READMES, ids=lambda path: os.path.relpath(path, ROOT))
def test_no_dated_history(readme):
    """Reference that stays true: git log keeps the history, not "since 2026-12-02"."""
    assert re.findall(r"\b(?:since|until|before|after) (?:\d{4}-\d\d-\d\d|\d\d?:\d\d)",
                      open(readme).read()) == []


def test_steps_per_run_is_taught_in_distributed_setup_alone():
    """--steps_per_run pays only on a toy-sized step, so only Distributed-Setup keeps it (and
    docs/performance.md, which points there, docs/appendix.md, which explains its block, and
    tests/README.md, which says what tests it)."""
    allowed = {"Distributed-Setup/README.md", "docs/performance.md", "docs/appendix.md",
               "tests/README.md"}
    naming = [os.path.relpath(path, ROOT) for path in READMES
              if "--steps_per_run" in open(path).read()]
    assert sorted(set(naming) - allowed) == []


def choosing_table():
    """The header and rows of the README's table under "Choosing an algorithm"."""
    text = open(README).read()
    section = text[text.index("## Choosing an algorithm"):]
    section = section[:section.index("\n## ", 1)]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    return rows[0], [row for row in rows[2:]]


def test_the_choosing_table_shows_what_the_benchmark_last_recorded():
    """The measured columns of "Choosing an algorithm" are the results block's numbers, for
    every example in it (`tools/benchmark.py --readme` writes both)."""
    with open(benchmark.RECORD) as record:
        summaries = json.load(record)["summaries"]
    measured = {"test accuracy": ("test_accuracy", 4),
                "launch → %.2f s" % benchmark.TARGET_ACCURACY: ("launch_to_target_seconds", 1),
                "steps/s together": ("aggregate_steps_per_second", 0),
                "× the one-process wall": (None, 2)}
    header, rows = choosing_table()
    columns = [(i, name) for i, name in enumerate(header) if name in measured]
    assert columns, "the table has measured columns"
    entries = sorted(s["entry"] for s in summaries)
    shown, wrong = set(), []
    for row in rows:
        target = re.search(r"\]\(([^)]+)\)", row[0]).group(1).rstrip("/")
        entry = next((e for e in entries if e == target or e.startswith(target + "/")), None)
        if entry is None:  # an example newer than the record: "-" until the next benchmark run
            assert [row[i] for i, _ in columns] == ["-"] * len(columns), row
            continue
        summary = next(s for s in summaries if s["entry"] == entry)
        shown.add(entry.split("/")[0])
        for i, name in columns:
            key, digits = measured[name]
            value = (benchmark.wall_ratio(summary, summaries) if key is None
                     else summary[key])
            if row[i] != benchmark.fmt(value, digits):
                wrong.append("%s, %s: %s, the record says %s"
                             % (entry, name, row[i], benchmark.fmt(value, digits)))
    assert wrong == []
    assert sorted(shown) == sorted({e.split("/")[0] for e in entries})


def test_the_benchmark_writes_the_choosing_tables_measured_cells():
    """`--readme` rewrites them from its run: the committed README from the committed record,
    and "-" for an example the run did not measure."""
    with open(benchmark.RECORD) as record:
        summaries = json.load(record)["summaries"]
    text = open(README).read()
    assert benchmark.with_choosing_table(text, summaries) == text
    left_out = next(s for s in summaries if s["entry"].startswith("AGN/"))
    rewritten = benchmark.with_choosing_table(text, [s for s in summaries if s is not left_out])
    changed = [(old, new) for old, new in zip(text.splitlines(), rewritten.splitlines())
               if old != new]
    assert len(changed) == 1 and changed[0][0].startswith("| [AGN](AGN/) |"), changed
    assert changed[0][1].endswith("| - | - | - | %s |" % changed[0][0].split(" | ")[-1][:-2])


def test_the_results_table_is_the_one_the_benchmark_last_recorded():
    with open(benchmark.RECORD) as record:
        report = json.load(record)
    assert benchmark.readme_section(open(benchmark.README).read()) == benchmark.render(
        report).strip()
    assert report["summaries"], "the record holds measurements"


def test_each_run_sh_wall_is_judged_against_the_one_process_wall_of_the_same_run():
    """Issue 19's target: every run.sh within 2.5× the one-process script's wall, both measured
    in one benchmark run; the summary names the entries over it."""
    def summary(entry, wall):
        return {"entry": entry, "wall_seconds": wall, "steps_per_second_per_worker": None,
                "launch_to_target_seconds": None}

    summaries = [summary(benchmark.BASELINE, 4.0), summary("A/run.sh", 9.0),
                 summary("B/run.sh", 12.0), summary("C/run.sh", 10.0)]
    assert benchmark.wall_ratio(summaries[1], summaries) == 2.25
    assert ("- run.sh walls within 2.5× the one-process script's: 2 of 3 (the slowest 3.00×); "
            "over: B/run.sh") in benchmark.ratios(summaries).splitlines()
    assert "| A/run.sh | - | - | 9.0 | 2.25 |" in benchmark.table(
        [dict(s, workers=None, test_accuracy=None, aggregate_steps_per_second=None, failures=0,
              repeats=1) for s in summaries])


@pytest.mark.tf2
def test_every_installed_package_is_pinned_in_the_requirements():
    """The environment that runs the tests holds only pinned packages (bash setup.sh [--tf2]
    test installs exactly requirements/tf1.txt or tf2.txt, jupyter.txt and test.txt): nothing
    that a fresh install could resolve to another version."""
    try:
        import importlib.metadata as metadata
    except ImportError:  # Python 3.7: the backport, which TensorFlow 1.15's Markdown needs
        import importlib_metadata as metadata
    flavour = "tf1" if sys.version_info[:2] == (3, 7) else "tf2"
    pinned = {}
    for name in (flavour, "jupyter", "test"):
        for line in open(os.path.join(ROOT, "requirements", name + ".txt")):
            requirement = line.split("#")[0].split(";")[0].strip()
            if "==" in requirement:
                package, version = requirement.split("==")
                pinned.setdefault(normalized(package), set()).add(version)
    unpinned = []
    for distribution in metadata.distributions():
        package = normalized(distribution.metadata["Name"])
        if package in ("pip", "setuptools", "wheel", "pkg-resources"):
            continue
        if distribution.version not in pinned.get(package, ()):
            unpinned.append("%s==%s" % (distribution.metadata["Name"], distribution.version))
    assert sorted(unpinned) == []


def normalized(package):
    return re.sub(r"[-_.]+", "-", package).lower()


def test_the_choosing_tables_emulated_column_is_the_committed_emulated_comparison():
    """Its last column: per scenario, the seconds to the target of each example's fastest
    configuration in results/emulated/raw.json, as tools/compare computes them."""
    from compare import emulated
    with open(os.path.join(ROOT, "results", "emulated", "raw.json")) as record:
        raw = json.load(record)
    cells = emulated.readme_cells(raw)
    text = open(README).read()
    assert emulated.with_readme_column(text, raw) == text  # (what --readme writes)
    header, rows = choosing_table()
    assert header[-1] == "emulated ResNet-50: s to 0.92, 10 Gb/s / 1 Gb/s / stragglers"
    shown = {}
    for row in rows:
        target = re.search(r"\]\(([^)]+)\)", row[0]).group(1).rstrip("/")
        shown[target[:-3] if target.endswith(".py") else target] = row[-1]
    assert {name: shown.get(name) for name in cells} == cells
    assert set(shown.values()) - set(cells.values()) <= {"– / – / –"}
