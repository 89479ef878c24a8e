"""Every example script stands alone, carries the appendix blocks it uses and no other, each
identical to its canonical text in tools/appendix/."""
import ast
import os
import re
import shutil
import sys

import pytest

from helpers import ROOT, load_example, run_script

import shared_helpers

SCRIPTS = shared_helpers.example_scripts()
THIRD_PARTY = {"numpy", "tensorflow", "sklearn"}
STANDARD_LIBRARY = {"argparse", "collections", "contextlib", "errno", "fcntl", "itertools", "json",
                    "math", "os", "re", "resource", "signal", "socket", "sys", "threading",
                    "time"}
# The shape of ../shared/STYLE.md: the algorithm (build_graph; the baseline's main) starts within
# the first screens, and the lesson and the model slot, from the first definition to the
# appendix, are short.
ALGORITHM_STARTS_BY = 80
LESSON_AT_MOST = 190


def test_every_script_holds_exactly_the_blocks_it_uses_each_identical_to_its_canonical_text():
    assert len(SCRIPTS) >= 3
    assert shared_helpers.differences() == []


def test_lesson_code_that_examples_share_stays_the_same_in_each():
    assert shared_helpers.twin_differences() == []


def test_every_block_is_used_by_some_example():
    assert shared_helpers.unused_blocks() == []


def test_sizes_show_each_block_with_its_lines_and_the_scripts_that_carry_it(capsys):
    shared_helpers.print_sizes()
    printed = capsys.readouterr().out
    for block in shared_helpers.blocks():
        carriers = [path for path in SCRIPTS if "\n" + block.text.splitlines()[0] + "\n"
                    in open(path).read()]
        assert re.search(r"^ *%d lines in +%d scripts? +%s$" % (
            block.text.count("\n"), len(carriers), re.escape(block.title)), printed, re.M), \
            block.title


def test_every_block_is_explained_once_in_docs_appendix():
    with open(os.path.join(ROOT, "docs", "appendix.md")) as docs:
        sections = re.findall(r"^## (.+)$", docs.read(), re.M)
    titles = [block.title for block in shared_helpers.blocks()]
    assert sorted(set(titles) - set(sections)) == []
    assert sorted(title for title in set(titles) if sections.count(title) > 1) == []


@pytest.mark.parametrize("slip, expected", [
    (lambda s: s.replace("    return min(max(args.timeout / 5.0, 0.2), 5.0)",
                         "    return min(max(args.timeout / 4.0, 0.2), 5.0)"),
     "drifted from its canonical text: Liveness: who is silent, and for how long"),
    (lambda s: s[:s.index("# -- Checkpoints")] + s[s.index("# -- The training loop's"):],
     "missing block: Checkpoints"),
    (lambda s: s.replace("# -- main ---", open(os.path.join(
        shared_helpers.BLOCKS_DIR, "85-steps-per-run.py")).read() + "\n\n# -- main ---"),
     "a block it does not use: K steps per session.run (--steps_per_run)")])
def test_a_drifted_missing_or_unused_block_is_reported(slip, expected, tmp_path):
    copy = tmp_path / "Hogwild.py"
    copy.write_text(slip(open(os.path.join(ROOT, "Hogwild", "Hogwild.py")).read()))
    assert expected in shared_helpers.appendix_differences(str(copy), shared_helpers.blocks())


def test_a_name_that_no_block_defines_is_reported(tmp_path):
    copy = tmp_path / "Hogwild.py"
    copy.write_text(open(os.path.join(ROOT, "Hogwild", "Hogwild.py")).read().replace(
        "theta = read_from_the_ps(params)", "theta = read_from_ps(params)"))
    assert shared_helpers.undefined_names(str(copy)) == ["read_from_ps"]


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
    block_names = set().union(*(block.defines for block in shared_helpers.blocks()))
    assert not lesson_names & block_names - {"main"}, "a block's definition above the appendix"
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
def test_help_shows_every_default(path, capsys):
    """--help is where people look: each flag that has a default says what it is. (The parser
    runs in this process: a process of its own would import TensorFlow for it.)"""
    with pytest.raises(SystemExit) as exit:
        load_example(path).parse_flags(["--help"])
    text = capsys.readouterr().out
    assert exit.value.code == 0, text
    for flag, default in [("--train_steps", None), ("--batch_size", "32"),
                          ("--learning_rate", None), ("--log_every", "250"),
                          ("--step_delay", "0.0")] + (
                             [("--timeout", "60.0")] if "--job_name" in text else []):
        found = re.search(r"\n  %s [A-Z_]+(.*?)(?=\n  -|\Z)" % flag, text, re.S)
        assert found, (flag, text)
        assert re.search(r"\(default: %s\)" % (default or r"[\d.]+"), " ".join(
            found.group(1).split())), (flag, found.group(1))
