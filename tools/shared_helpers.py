"""Keep the small helpers that every example script repeats identical to the template's.

Each example is one file that a user can copy alone, so the cluster, data and model helpers are
repeated in every script on purpose. Distributed-Setup/dist_setup.py holds the reference copy;
this tool lists where another script differs (what tests/test_shared_helpers.py asserts), and
with --write copies the reference over them.

    python tools/shared_helpers.py            # list differences, exit 1 if there are any
    python tools/shared_helpers.py --write    # make every script match the template
"""
import ast
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(ROOT, "Distributed-Setup", "dist_setup.py")
SHARED = ["OneLineErrorParser", "add_cluster_flags", "add_training_flags", "check_training_flags",
          "parse_host_list", "cluster_from_flags", "task_name", "session_config", "Watchdog",
          "why_stuck", "unreachable", "describe", "status_queues", "ready_queue",
          "run_parameter_server", "tell_parameter_servers", "wait_until_chief_is_ready",
          "CloseReadyQueueHook", "load_dataset", "worker_batches", "initial_parameters",
          "create_parameters", "logits", "cross_entropy", "accuracy", "pack", "unpack",
          "by_ps_task", "read_from_the_ps", "apply_on_the_ps", "report"]


def example_scripts():
    """Every example script: the baseline and each folder's scripts that define ALGORITHM."""
    paths = [os.path.join(ROOT, "Non-Distributed_Setup.py")]
    paths += sorted(glob.glob(os.path.join(ROOT, "*", "*.py")))
    return [path for path in paths
            if os.path.isfile(path) and "\nALGORITHM = " in open(path).read()]


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


def differences():
    """[(script, helper)] for every shared helper a script defines differently or out of order."""
    reference = definitions(open(TEMPLATE).read())
    found = []
    for path in example_scripts():
        own = definitions(open(path).read())
        shared_here = [name for name in own if name in SHARED]
        expected_order = [name for name in SHARED if name in own]
        if shared_here != expected_order:
            found.append((path, "order: %s" % ", ".join(shared_here)))
        found += [(path, name) for name in shared_here if own[name] != reference[name]]
    return found


def unused_definitions(path):
    """Top-level functions and classes nothing in the script refers to (dead code)."""
    source = open(path).read()
    tree = ast.parse(source)
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    return [name for name in top_level_definitions(source) if name not in used | {"main"}]


def write():
    reference = definitions(open(TEMPLATE).read())
    for path in example_scripts():
        source = open(path).read()
        lines = source.splitlines()
        spans = top_level_definitions(source)
        for name in sorted((n for n in spans if n in SHARED), key=lambda n: -spans[n][0]):
            first, last = spans[name]
            lines[first - 1:last] = reference[name].splitlines()
        updated = "\n".join(lines) + "\n"
        if updated != source:
            open(path, "w").write(updated)
            print("updated", os.path.relpath(path, ROOT))


def main():
    if "--write" in sys.argv[1:]:
        write()
    found = differences()
    for path, name in found:
        print("%s: %s differs from %s" % (os.path.relpath(path, ROOT), name,
                                           os.path.relpath(TEMPLATE, ROOT)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
