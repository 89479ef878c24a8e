"""Keep the appendix that every example script repeats identical to the template's.

Each example is one file that a user can copy alone, so the flags, the cluster lifecycle, the data
and the model are repeated in every script on purpose, in an appendix below the lesson (see
../shared/STYLE.md). Distributed-Setup/dist_setup.py holds the reference appendix, and
Synchronous-SGD/ssgd.py the reference block of the synchronous family. This tool lists where
another script differs (what tests/test_shared_helpers.py asserts), and with --write copies the
references over them. The one-process baseline has no cluster: each helper it shares with the
appendix must match the template's, definition by definition. Lesson code that twin
examples share (TWINS: the windowed loop of AGN and both DOWNPOURs, the elastic exchange) is
listed too where a copy drifts; those copies are fixed by hand.

    python tools/shared_helpers.py            # list differences, exit 1 if there are any
    python tools/shared_helpers.py --write    # make every script match the templates
"""
import ast
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(ROOT, "Distributed-Setup", "dist_setup.py")
FAMILY_TEMPLATE = os.path.join(ROOT, "Synchronous-SGD", "ssgd.py")
RULE = "# " + "=" * 93 + "\n"
# Lesson code that two or three examples share on purpose, because the algorithms share it: it
# stays in each lesson (it is what the reader came for), and must stay the same there, up to
# the tag comments that name each algorithm ("# AGN: ...").
TWINS = [("elastic_exchange", ["AEASGD/AEASGD.py", "EAMSGD/EAMSGD.py"]),
         ("copy_under_the_lock", ["DynSGD/DynSGD.py",
                                  "Staleness-Aware-SGD/Staleness-Aware-SGD.py"]),
         ("train", ["AGN/AGN.py", "DOWNPOUR/DOWNPOUR.py", "DOWNPOUR-Easy/DOWNPOUR.py"]),
         ("train", ["AEASGD/AEASGD.py", "EAMSGD/EAMSGD.py"]),
         ("train", ["Synchronous-SGD/ssgd.py", "Synchronous-SGD-different-learning-rates/ssgd.py"]),
         ("pull", ["DOWNPOUR/DOWNPOUR.py", "DOWNPOUR-Easy/DOWNPOUR.py"]),
         ("learning_rate", ["AllReduce-SGD/AllReduce-SGD.py", "Synchronous-SGD/ssgd.py"]),
         ("add_learning_rate_schedule", ["AllReduce-SGD/AllReduce-SGD.py",
                                         "Synchronous-SGD/ssgd.py"])]
TAG = re.compile(r"# [A-Za-z][\w-]*: ")
APPENDIX_BANNER = RULE + "# Appendix: what every example shares"
FAMILY_BANNER = RULE + "# Appendix, synchronous family:"


def example_scripts():
    """Every example script: the baseline and each folder's scripts that define ALGORITHM."""
    paths = [os.path.join(ROOT, "Non-Distributed_Setup.py")]
    paths += sorted(glob.glob(os.path.join(ROOT, "*", "*.py")))
    return [path for path in paths
            if os.path.isfile(path) and "\nALGORITHM = " in open(path).read()]


def split(source):
    """(lesson, family block, appendix) of a script's text; the last two may be empty."""
    appendix_at = source.find(APPENDIX_BANNER)
    if appendix_at < 0:
        return source, "", ""
    family_at = source.find(FAMILY_BANNER, 0, appendix_at)
    lesson_end = appendix_at if family_at < 0 else family_at
    return source[:lesson_end], source[lesson_end:appendix_at], source[appendix_at:]


def lesson_of(source):
    """The text above the first appendix banner: the docstring and the lesson."""
    found = source.find(RULE + "# Appendix")
    return source if found < 0 else source[:found]


def top_level_definitions(source):
    """{name: (first line, last line)} of each top-level def and class, 1-based, inclusive."""
    tree = ast.parse(source)
    lines = source.splitlines()
    spans = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            first = node.lineno - len(getattr(node, "decorator_list", []))
            last = node.body[-1].lineno
            while last < len(lines) and (lines[last].startswith((" ", "\t")) or
                                         not lines[last].strip() and last + 1 < len(lines)
                                         and lines[last + 1].startswith((" ", "\t"))):
                last += 1
            spans[node.name] = (first, last)
    return spans


def definitions(source):
    lines = source.splitlines()
    return {name: "\n".join(lines[first - 1:last])
            for name, (first, last) in top_level_definitions(source).items()}


def appendix_names():
    """The helpers of the appendix, in their order (main is each script's own entry point)."""
    lesson, _, _ = split(open(TEMPLATE).read())
    first = lesson.count("\n") + 1
    spans = top_level_definitions(open(TEMPLATE).read())
    return sorted((name for name, (start, _) in spans.items() if start > first and name != "main"),
                  key=lambda name: spans[name][0])


def differences():
    """[(script, what)] for every script whose appendix, family block or shared helper differs
    from the template's."""
    template = open(TEMPLATE).read()
    _, _, appendix = split(template)
    _, family, _ = split(open(FAMILY_TEMPLATE).read())
    reference = definitions(template)
    shared = appendix_names()
    found = []
    for path in example_scripts():
        lesson, own_family, own_appendix = split(open(path).read())
        if own_appendix:
            if own_appendix != appendix:
                found.append((path, "the appendix (from the template's)"))
            if own_family and own_family != family:
                found.append((path, "the synchronous family's block (from %s's)"
                              % os.path.relpath(FAMILY_TEMPLATE, ROOT)))
            continue
        own = definitions(lesson)
        shared_here = [name for name in own if name in shared]
        if shared_here != [name for name in shared if name in own]:
            found.append((path, "order: %s" % ", ".join(shared_here)))
        found += [(path, "%s (from the template's)" % name) for name in shared_here
                  if own[name] != reference[name]]
    return found


def names_used(tree):
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return used | {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}


def twin_differences():
    """[(script, what)] for every twin of TWINS that differs from the first of its list (tags
    aside). They are fixed by hand: each copy keeps its own tags."""
    found = []
    for name, paths in TWINS:
        copies = [TAG.sub("# TAG: ", definitions(open(os.path.join(ROOT, path)).read())[name])
                  for path in paths]
        found += [(os.path.join(ROOT, path), "%s, the twin of %s's," % (name, paths[0]))
                  for path, copy in zip(paths[1:], copies[1:]) if copy != copies[0]]
    return found


def unused_definitions(path):
    """The lesson's top-level functions and classes that nothing in the script refers to (dead
    code). The appendix is the same everywhere, so a helper of it that one example does not
    need is not dead there: see unused_appendix_helpers."""
    source = open(path).read()
    lesson_end = lesson_of(source).count("\n") + 1
    used = names_used(ast.parse(source))
    return [name for name, (first, _) in top_level_definitions(source).items()
            if first < lesson_end and name not in used | {"main"}]


def unused_appendix_helpers():
    """Helpers of the appendix that no example uses, apart from its own definition: dead code
    in every copy."""
    used = set()
    for path in example_scripts():
        for node in ast.parse(open(path).read()).body:
            parts = node.body if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [node]
            for part in parts:
                used |= names_used(part)
    return [name for name in appendix_names() if name not in used]


def write():
    template = open(TEMPLATE).read()
    _, _, appendix = split(template)
    _, family, _ = split(open(FAMILY_TEMPLATE).read())
    reference = definitions(template)
    shared = appendix_names()
    for path in example_scripts():
        source = open(path).read()
        lesson, own_family, own_appendix = split(source)
        if own_appendix:
            updated = lesson + (family if own_family else "") + appendix
        else:
            lines = source.splitlines()
            spans = top_level_definitions(source)
            for name in sorted((n for n in spans if n in shared), key=lambda n: -spans[n][0]):
                first, last = spans[name]
                lines[first - 1:last] = reference[name].splitlines()
            updated = "\n".join(lines) + "\n"
        if updated != source:
            open(path, "w").write(updated)
            print("updated", os.path.relpath(path, ROOT))


def main():
    if "--write" in sys.argv[1:]:
        write()
    found = differences() + twin_differences()
    for path, what in found:
        print("%s: %s differs" % (os.path.relpath(path, ROOT), what))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
