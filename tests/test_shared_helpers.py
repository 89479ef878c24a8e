"""Every example script stands alone, and the helpers they repeat stay identical."""
import ast
import os
import re
import shutil
import sys

import pytest

from helpers import ROOT, run_script

import shared_helpers

SCRIPTS = shared_helpers.example_scripts()
THIRD_PARTY = {"numpy", "tensorflow", "sklearn"}
STANDARD_LIBRARY = {"argparse", "collections", "contextlib", "errno", "fcntl", "itertools", "json",
                    "math", "os", "re", "resource", "signal", "socket", "sys", "threading",
                    "time"}
# The shape of ../shared/STYLE.md: the algorithm (build_graph; the baseline's main) starts within
# the first screens, and the lesson, from its first definition to the appendix, is short.
ALGORITHM_STARTS_BY = 80
LESSON_AT_MOST = 140


def test_the_shared_helpers_are_identical_in_every_script():
    assert len(SCRIPTS) >= 3
    assert shared_helpers.differences() == []


def test_lesson_code_that_examples_share_stays_the_same_in_each():
    assert shared_helpers.twin_differences() == []


def test_every_helper_of_the_appendix_is_used_by_some_example():
    assert shared_helpers.unused_appendix_helpers() == []


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: os.path.relpath(path, ROOT))
def test_no_dead_code(path):
    assert shared_helpers.unused_definitions(path) == []


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: os.path.relpath(path, ROOT))
def test_the_lesson_comes_first_and_the_appendix_last(path):
    """Docstring; the lesson (flags, build_graph, train); one banner; the appendix, which ends
    with main and the __main__ guard."""
    source = open(path).read()
    tree = ast.parse(source)
    assert ast.get_docstring(tree), "the docstring comes first"
    lesson_lines = shared_helpers.lesson_of(source).count("\n") + 1
    assert lesson_lines < source.count("\n"), "no appendix banner"
    spans = shared_helpers.top_level_definitions(source)
    in_lesson = sorted((first, name) for name, (first, _) in spans.items() if first < lesson_lines)
    algorithm = "main" if "def build_graph" not in source else "build_graph"
    assert spans[algorithm][0] <= ALGORITHM_STARTS_BY, (algorithm, spans[algorithm][0])
    assert lesson_lines - in_lesson[0][0] <= LESSON_AT_MOST, lesson_lines - in_lesson[0][0]
    lesson_names = {name for _, name in in_lesson}
    assert {"parse_flags", algorithm} <= lesson_names
    assert ("train" in lesson_names) == (algorithm == "build_graph")
    assert not lesson_names & set(shared_helpers.appendix_names()), "a shared helper above"
    last = tree.body[-1]
    assert isinstance(last, ast.If) and "__main__" in ast.dump(last.test), "__main__ guard last"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: os.path.relpath(path, ROOT))
def test_imports_only_tensorflow_numpy_sklearn_and_the_standard_library(path):
    tree = ast.parse(open(path).read())
    modules = {alias.name.split(".")[0] for node in ast.walk(tree)
               if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom)}
    assert modules <= THIRD_PARTY | STANDARD_LIBRARY, modules - THIRD_PARTY - STANDARD_LIBRARY


@pytest.mark.tf2
def test_a_script_copied_alone_still_runs(tmp_path):
    """The way people use the collection: copy one file into their own project."""
    copy = shutil.copy(os.path.join(ROOT, "Distributed-Setup", "dist_setup.py"), str(tmp_path))
    code, text = run_script([sys.executable, copy, "--help"], cwd=str(tmp_path))
    assert code == 0 and "--worker_hosts" in text, text


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: os.path.relpath(path, ROOT))
def test_help_shows_every_default(path):
    """--help is where people look: each flag that has a default says what it is."""
    code, text = run_script([sys.executable, path, "--help"])
    assert code == 0, text
    for flag, default in [("--train_steps", None), ("--batch_size", "32"),
                          ("--learning_rate", None), ("--log_every", "250"),
                          ("--step_delay", "0.0")] + (
                             [("--timeout", "60.0")] if "--job_name" in text else []):
        found = re.search(r"\n  %s [A-Z_]+(.*?)(?=\n  -|\Z)" % flag, text, re.S)
        assert found, (flag, text)
        assert re.search(r"\(default: %s\)" % (default or r"[\d.]+"), " ".join(
            found.group(1).split())), (flag, found.group(1))
