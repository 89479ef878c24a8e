"""Compose and check each example's appendix from the canonical blocks in tools/appendix/.

A user copies one script, so the plumbing it needs is repeated in it on purpose, below its lesson
and its model slot, as named blocks (../shared/STYLE.md): each script holds exactly the blocks
it uses, in one order, each identical to its canonical text in tools/appendix/, and
docs/appendix.md explains each block once. A block is used when the lesson, or a block it uses,
refers to a name the block defines; a block whose file starts with "# only where ..." is the
variant for examples with (or without) a parameter server. Lesson code that twin examples share
on purpose (TWINS) and the model slot (load_data, model) must stay alike too.

    python tools/shared_helpers.py            # list what differs, exit 1 if anything does
    python tools/shared_helpers.py --write    # rewrite every appendix from the blocks
    python tools/shared_helpers.py --sizes    # each script's and each block's lines
"""
import ast
import collections
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCKS_DIR = os.path.join(ROOT, "tools", "appendix")
RULE = "# " + "=" * 93 + "\n"
BANNER = RULE + (
    "# Appendix: the blocks of plumbing this example uses, each the same in every script that\n"
    "# uses it (tools/shared_helpers.py checks them; docs/appendix.md explains them). Nothing\n"
    "# below is specific to the algorithm above.\n") + RULE
OLD_BANNERS = (RULE + "# Appendix",)
HEADER = re.compile(r"^# -- (.+) -{3,}$")
CONDITION = re.compile(r"^# only where (there is a ps|PARAMETER_SERVERS = 0)\n")
STDLIB = ("argparse", "collections", "contextlib", "fcntl", "json", "os", "socket", "sys",
          "threading", "time")
# Lesson code that examples share because their algorithms do: it stays in each lesson, the
# same up to the tag comments that name each algorithm ("# AGN: ...").
TWINS = [("elastic_exchange", ["AEASGD/AEASGD.py", "EAMSGD/EAMSGD.py"]),
         ("copy_under_the_lock", ["DynSGD/DynSGD.py",
                                  "Staleness-Aware-SGD/Staleness-Aware-SGD.py"]),
         ("train", ["AGN/AGN.py", "DOWNPOUR/DOWNPOUR.py", "DOWNPOUR-Easy/DOWNPOUR.py"]),
         ("train", ["AEASGD/AEASGD.py", "EAMSGD/EAMSGD.py"]),
         ("train", ["Synchronous-SGD/ssgd.py", "Synchronous-SGD-different-learning-rates/ssgd.py"]),
         ("pull", ["DOWNPOUR/DOWNPOUR.py", "DOWNPOUR-Easy/DOWNPOUR.py"]),
         ("learning_rate", ["AllReduce-SGD/AllReduce-SGD.py", "Synchronous-SGD/ssgd.py"]),
         ("all_reduce", ["AllReduce-SGD/AllReduce-SGD.py", "Pipe-SGD/Pipe-SGD.py"]),
         ("broadcast_from_worker0", ["AllReduce-SGD/AllReduce-SGD.py", "Pipe-SGD/Pipe-SGD.py"]),
         ("train", ["AllReduce-SGD/AllReduce-SGD.py", "Pipe-SGD/Pipe-SGD.py"]),
         ("add_learning_rate_schedule", ["AllReduce-SGD/AllReduce-SGD.py",
                                         "Synchronous-SGD/ssgd.py"])]
SLOT = ("load_data", "model")
TAG = re.compile(r"# [A-Za-z][\w-]*: ")
MAIN_GUARD = ('\n\n\nif __name__ == "__main__":\n    try:\n        sys.exit(main())\n'
              '    except KeyboardInterrupt:\n        sys.exit(130)\n')


class Block:
    """One canonical block: its id (the file's name), title, condition, text and names."""

    def __init__(self, path):
        self.id = os.path.splitext(os.path.basename(path))[0].split("-", 1)[1]
        text = open(path).read()
        found = CONDITION.match(text)
        self.condition = found.group(1) if found else None
        self.text = text[found.end():] if found else text
        first = self.text.splitlines()[0]
        self.title = HEADER.match(first).group(1)
        tree = ast.parse(self.text)
        self.defines = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                self.defines.add(node.name)
            elif isinstance(node, ast.Assign):
                self.defines |= {target.id for target in node.targets
                                 if isinstance(target, ast.Name)}
        self.uses = names_used(tree) - self.defines

    def fits(self, has_ps):
        return self.condition is None or (self.condition == "there is a ps") == has_ps


def names_used(tree):
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def blocks():
    return [Block(path) for path in sorted(glob.glob(os.path.join(BLOCKS_DIR, "*.py")))]


def example_scripts():
    """Every example script: the baseline and each folder's scripts that define ALGORITHM."""
    paths = [os.path.join(ROOT, "Non-Distributed_Setup.py")]
    paths += sorted(glob.glob(os.path.join(ROOT, "*", "*.py")))
    return [path for path in paths
            if os.path.isfile(path) and "\nALGORITHM = " in open(path).read()]


def lesson_of(source):
    """The text above the appendix: the docstring, the lesson and the model slot."""
    starts = [source.find(banner) for banner in (BANNER,) + OLD_BANNERS]
    starts = [start for start in starts if start >= 0]
    return source[:min(starts)] if starts else source


def has_parameter_servers(lesson):
    return "\nPARAMETER_SERVERS = 0" not in lesson


def blocks_needed(lesson, available=None):
    """The blocks that the lesson uses, directly or through other blocks, in their order."""
    has_ps = has_parameter_servers(lesson)
    candidates = [block for block in (available or blocks()) if block.fits(has_ps)]
    tree = ast.parse(lesson)
    defined = {node.name for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    needed = names_used(tree) | ({"main"} - defined)
    chosen = []
    while True:
        more = [block for block in candidates
                if block not in chosen and block.defines & needed]
        if not more:
            return [block for block in candidates if block in chosen]
        for block in more:
            chosen.append(block)
            needed |= block.uses


def composed(source, available=None):
    """The script as it should be: its lesson, the banner and the blocks it uses."""
    lesson = lesson_of(source).rstrip("\n") + "\n\n\n"
    needed = blocks_needed(lesson, available)
    text = lesson + BANNER + "\n\n".join(block.text.rstrip("\n") + "\n" for block in needed)
    own_main = "main" not in set().union(*(block.defines for block in needed))
    return text.rstrip("\n") + MAIN_GUARD if own_main else text


def top_level_definitions(source):
    """{name: (first line, last line)} of each top-level def and class, 1-based, inclusive."""
    lines = source.splitlines()
    spans = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            last = node.body[-1].lineno  # (Python 3.7 has no end_lineno)
            while last < len(lines) and (lines[last].startswith((" ", "\t")) or
                                         not lines[last].strip() and last + 1 < len(lines)
                                         and lines[last + 1].startswith((" ", "\t"))):
                last += 1
            spans[node.name] = (node.lineno - len(node.decorator_list), last)
    return spans


def definitions(source):
    """{name: text} of each top-level def and class of source."""
    lines = source.splitlines()
    return {name: "\n".join(lines[first - 1:last])
            for name, (first, last) in top_level_definitions(source).items()}


def appendix_differences(path, available):
    """What differs between a script's appendix and the blocks it uses."""
    source = open(path).read()
    if source == composed(source, available):
        return []
    appendix = source[len(lesson_of(source)):]
    present = [HEADER.match(line).group(1) for line in appendix.splitlines()
               if HEADER.match(line)]
    wanted = [block.title for block in blocks_needed(lesson_of(source), available)]
    found = ["missing block: %s" % title for title in wanted if title not in present]
    found += ["a block it does not use: %s" % title for title in present if title not in wanted]
    if not found and present != wanted:
        found.append("the blocks' order")
    if not found:
        texts = {block.title: block.text.rstrip("\n") for block in available}
        for title in present:
            start = appendix.index("# -- %s " % title)
            if not appendix[start:].startswith(texts[title]):
                found.append("drifted from its canonical text: %s" % title)
    return found or ["the appendix around its blocks (banner, blank lines)"]


def import_differences(path):
    """Standard modules the script uses but does not import, or imports but does not use."""
    tree = ast.parse(open(path).read())
    imported = {alias.asname or alias.name for node in tree.body
                if isinstance(node, ast.Import) for alias in node.names}
    used = names_used(tree) | {node.value.id for node in ast.walk(tree)
                               if isinstance(node, ast.Attribute)
                               and isinstance(node.value, ast.Name)}
    return (["imports %s, which it does not use" % name
             for name in sorted(imported & set(STDLIB) - used)]
            + ["uses %s without importing it" % name
               for name in sorted(used & set(STDLIB) - imported)])


def undefined_names(path):
    """Names the script reads that nothing in it binds (a block it needs and does not have)."""
    import builtins
    tree = ast.parse(open(path).read())
    bound = set(dir(builtins)) | {"__file__", "__name__"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return sorted({node.id for node in ast.walk(tree)
                   if isinstance(node, ast.Name) and node.id not in bound})


def twin_differences():
    """[(script, what)] for each twin, and each slot function, unlike its first copy."""
    scripts = [os.path.relpath(path, ROOT) for path in example_scripts()]
    found = []
    for name, paths in TWINS + [(name, scripts) for name in SLOT]:
        copies = [TAG.sub("# TAG: ", definitions(open(os.path.join(ROOT, path)).read())
                          .get(name, "")) for path in paths]
        found += [(os.path.join(ROOT, path), "%s, the twin of %s's," % (name, paths[0]))
                  for path, copy in zip(paths[1:], copies[1:]) if copy != copies[0]]
    return found


def unused_definitions(path):
    """The lesson's top-level functions and classes that nothing in the script refers to."""
    source = open(path).read()
    lesson_end = lesson_of(source).count("\n") + 1
    tree = ast.parse(source)
    used = names_used(tree) | {node.attr for node in ast.walk(tree)
                               if isinstance(node, ast.Attribute)}
    return [name for name, (first, _) in top_level_definitions(source).items()
            if first < lesson_end and name not in used | {"main"}]


def sizes():
    """[(script, lines, lines of the lesson and the model slot)] of every example script."""
    found = []
    for path in example_scripts():
        source = open(path).read()
        found.append((os.path.relpath(path, ROOT), source.count("\n"),
                      lesson_of(source).count("\n")))
    return found


def print_sizes():
    """The weight a reader and a copier carry, against ../shared/STYLE.md's targets."""
    rows = sorted(sizes(), key=lambda row: row[1])
    for script, lines, lesson in rows:
        print("%5d lines, lesson and slot %4d (%3.0f %%)  %s"
              % (lines, lesson, 100.0 * lesson / lines, script))
    print("\nwhere the appendix's lines go: each block, its lines, the scripts that carry it")
    carried = carriers()
    for block in blocks():
        print("%5d lines in %2d script%s  %s" % (block.text.count("\n"), carried[block.id],
                                                  " " if carried[block.id] == 1 else "s",
                                                  block.title))
    distributed = sorted(lines for script, lines, _ in rows if "/" in script)
    print("%d distributed scripts: median %d lines, largest %d (targets: median <= 600, none "
          "over 700, lesson and slot >= 20 %%)" % (len(distributed),
                                                  distributed[(len(distributed) - 1) // 2],
                                                  distributed[-1]))


def carriers():
    """How many example scripts carry each block, by the block's id."""
    available = blocks()
    return collections.Counter(block.id for path in example_scripts()
                               for block in blocks_needed(lesson_of(open(path).read()), available))


def unused_blocks():
    """Canonical blocks that no example uses."""
    carried = carriers()
    return [block.id for block in blocks() if not carried[block.id]]


def differences():
    available = blocks()
    found = []
    for path in example_scripts():
        found += [(path, what) for what in appendix_differences(path, available)]
        found += [(path, what) for what in import_differences(path)]
        found += [(path, "uses %s, which nothing defines" % name)
                  for name in undefined_names(path)]
    return found + [(path, "%s differs" % what) for path, what in twin_differences()]


def write():
    available = blocks()
    for path in example_scripts():
        source = open(path).read()
        updated = composed(source, available)
        if updated != source:
            open(path, "w").write(updated)
            print("updated", os.path.relpath(path, ROOT))


def main():
    if "--sizes" in sys.argv[1:]:
        print_sizes()
        return 0
    if "--write" in sys.argv[1:]:
        write()
    found = differences()
    for path, what in found:
        print("%s: %s" % (os.path.relpath(path, ROOT), what))
    for block in unused_blocks():
        print("tools/appendix: no example uses the block %s" % block)
    return 1 if found or unused_blocks() else 0


if __name__ == "__main__":
    sys.exit(main())
