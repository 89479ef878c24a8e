"""What the cluster-engine tests share: the cluster resolution of Cluster-Engines/ as the examples'
appendix will hold it, and copies of an example with it pasted in."""
import json
import os
import socket

from helpers import ROOT

import shared_helpers

ENGINES = os.path.join(ROOT, "Cluster-Engines")
CLUSTER_RESOLUTION = os.path.join(ENGINES, "cluster_from_flags.py")
# A script that reads Slurm's environment itself names this variable (cluster_from_slurm does).
READS_SLURM = "SLURM_STEP_TASKS_PER_NODE"
CHIEF_REFUSAL = "declare it as one more worker"  # what the new cluster_from_flags says to a chief


def resolution_names():
    """The functions of Cluster-Engines/cluster_from_flags.py, in their order."""
    spans = shared_helpers.top_level_definitions(open(CLUSTER_RESOLUTION).read())
    return sorted(spans, key=lambda name: spans[name][0])


def resolution_functions(parse_host_list=None):
    """The functions as a namespace, with what the appendix gives them (os, json, socket)."""
    namespace = {"os": os, "json": json, "socket": socket, "parse_host_list": parse_host_list}
    exec(compile(open(CLUSTER_RESOLUTION).read(), CLUSTER_RESOLUTION, "exec"), namespace)
    return namespace


def with_cluster_resolution(source):
    """An example's source with its cluster_from_flags (and any of the new functions it already
    has) replaced by Cluster-Engines/cluster_from_flags.py, where cluster_from_flags was."""
    lines = source.splitlines()
    spans = shared_helpers.top_level_definitions(source)
    present = sorted((name for name in resolution_names() if name in spans),
                     key=lambda name: -spans[name][0])
    for name in present:
        first, last = spans[name]
        while last < len(lines) and not lines[last].strip():
            last += 1  # the blank lines after it
        replacement = open(CLUSTER_RESOLUTION).read() + "\n\n" if name == "cluster_from_flags" \
            else ""
        lines[first - 1:last] = replacement.splitlines()
    return "\n".join(lines) + "\n"


def patched_example(relative_path, directory):
    """A copy of the example, in directory, with the new cluster resolution pasted in."""
    path = os.path.join(directory, os.path.basename(relative_path))
    with open(path, "w") as copy:
        copy.write(with_cluster_resolution(open(os.path.join(ROOT, relative_path)).read()))
    return path


def reads_slurm(path):
    return READS_SLURM in open(path).read()
