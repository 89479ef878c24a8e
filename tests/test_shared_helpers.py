"""Every example script stands alone, and the helpers they repeat stay identical."""
import ast
import os
import shutil
import sys

import pytest

from helpers import ROOT, run_script

import shared_helpers

SCRIPTS = shared_helpers.example_scripts()
THIRD_PARTY = {"numpy", "tensorflow", "sklearn"}
STANDARD_LIBRARY = {"argparse", "collections", "itertools", "json", "math", "os", "re",
                    "signal", "socket", "sys", "threading", "time"}


def test_the_shared_helpers_are_identical_in_every_script():
    assert len(SCRIPTS) >= 3
    assert shared_helpers.differences() == []


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: os.path.relpath(path, ROOT))
def test_no_dead_code(path):
    assert shared_helpers.unused_definitions(path) == []


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
