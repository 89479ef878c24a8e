"""The READMEs name only paths that exist, and the results they show are the benchmark's."""
import glob
import json
import os
import re
import sys

import pytest

from helpers import ROOT

import benchmark
import compare

# Files the project's tools write when run (named in the READMEs, not part of the repository).
TOOL_OUTPUTS = {compare.RAW_FILE, compare.MARKDOWN_FILE, compare.CSV_FILE, compare.ACCURACY_PLOT,
                compare.SCALING_PLOT, compare.STRAGGLER_PLOT}

READMES = sorted(glob.glob(os.path.join(ROOT, "README.md"))
                 + glob.glob(os.path.join(ROOT, "*", "README.md")))
LINK = re.compile(r"\]\(([^)#\s]+)")
CODE_PATH = re.compile(r"`([\w./-]+\.(?:py|sh|ipynb|txt|json|md))`")


def named_paths(readme):
    text = open(readme).read()
    links = [link for link in LINK.findall(text) if "://" not in link]
    return links, CODE_PATH.findall(text)


@pytest.mark.parametrize("readme", READMES, ids=lambda path: os.path.relpath(path, ROOT))
def test_every_path_a_readme_names_exists(readme):
    folder = os.path.dirname(readme)
    links, code_paths = named_paths(readme)
    missing = [link for link in links if not os.path.exists(os.path.join(folder, link))]
    # A file named in code may be relative to the README's folder or to the repository root,
    # or be a file inside the folder named by the example's own README.
    missing += [path for path in code_paths if path not in TOOL_OUTPUTS
                and not any(os.path.exists(os.path.join(base, path))
                           for base in (folder, ROOT))
                and not glob.glob(os.path.join(ROOT, "*", path))]
    assert missing == []


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
    test installs exactly requirements/tf1.txt or tf2.txt, and test.txt): nothing that a fresh
    install could resolve to another version."""
    try:
        import importlib.metadata as metadata
    except ImportError:  # Python 3.7: the backport, which TensorFlow 1.15's Markdown needs
        import importlib_metadata as metadata
    flavour = "tf1" if sys.version_info[:2] == (3, 7) else "tf2"
    pinned = {}
    for name in (flavour, "test"):
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
