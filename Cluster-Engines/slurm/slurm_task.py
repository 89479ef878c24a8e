"""Start one task of an example with the cluster flags that its Slurm job step gives it.

train.sbatch runs this through srun, once per Slurm task (one Slurm task is one TensorFlow task):
it works out --job_name, --task_index, --ps_hosts and --worker_hosts from the step's
environment, then replaces itself with the example (same process, so Slurm signals and counts
the example itself). The examples read only the cluster flags and TF_CONFIG; Slurm's variables
are read here and nowhere else.

    srun --distribution=block python Cluster-Engines/slurm/slurm_task.py EXAMPLE.py [flags...]

The layout: the first $SLURM_PS_TASKS (default 1) tasks, in rank order, are parameter servers,
the others workers (worker 0 is the chief). Every task works out every task's address alone, so
they must be where srun's block distribution puts them: node by node, in the order of
SLURM_STEP_NODELIST (a compressed list such as node[01-03,7], expanded as `scontrol show
hostnames` does), SLURM_STEP_TASKS_PER_NODE (such as 2(x3),1) on each. The i-th task on a node
listens on 16384 + (job id mod 512) * 32 + i: ports 16384-32767, below Linux's ephemeral range,
and two jobs that share a node collide only if their ids are equal mod 512. A step that cannot be
laid out so is refused with one line and exit code 2, before the example starts.
"""
import argparse
import itertools
import os
import re
import sys

FIRST_PORT, JOB_SLOTS, TASKS_PER_NODE = 16384, 512, 32
# Slurm's own bound on one host range. It bounds the names a host list may expand to and the
# tasks a step may have, checked before anything is expanded: a list such as node[1-99999999]
# is refused at once instead of being expanded for minutes.
MAX_TASKS = 65536
CLUSTER_FLAGS = ("--job_name", "--task_index", "--ps_hosts", "--worker_hosts")
RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
REPEATED_COUNT = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")


class LayoutError(ValueError):
    """A step that this wrapper cannot lay out: why, in one line."""


def shown(value, limit=60):
    """A variable's value for a one-line message: escaped, and cut if it is long."""
    cut = value if len(value) <= limit else "%s... (%d characters)" % (value[:limit], len(value))
    return ascii(cut)


def host_patterns(text):
    """'node[01-03,7],gpu1' -> ['node[01-03,7]', 'gpu1']: split at the commas outside brackets."""
    patterns, start, depth = [], 0, 0
    for at, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            raise LayoutError("SLURM_STEP_NODELIST=%s is not a Slurm host list (brackets)"
                              % shown(text))
        if char == "," and depth == 0:
            patterns.append(text[start:at])
            start = at + 1
    if depth:
        raise LayoutError("SLURM_STEP_NODELIST=%s is not a Slurm host list (an unclosed "
                          "bracket)" % shown(text))
    return patterns + [text[start:]]


def pattern_parts(pattern, text):
    """'a[1-2]b[08-09]' -> ['a', [(1, 2, 1)], 'b', [(8, 9, 2)], '']: the literal pieces and,
    between them, each bracket's ranges as (low, high, digits)."""
    parts = re.split(r"\[([^\]]*)\]", pattern)  # literal, ranges, literal, ..., literal
    if not pattern or "[" in "".join(parts[::2]) or "]" in "".join(parts[::2]):
        raise LayoutError("SLURM_STEP_NODELIST=%s is not a Slurm host list (%s)"
                          % (shown(text), shown(pattern) if pattern else "an empty name"))
    for index in range(1, len(parts), 2):
        ranges = []
        for item in parts[index].split(","):
            found = RANGE.fullmatch(item)
            low = int(found.group(1)) if found else None
            high = int(found.group(2) or low) if found else None
            if not found or high < low:
                raise LayoutError("SLURM_STEP_NODELIST=%s is not a Slurm host list (range %s)"
                                  % (shown(text), shown(item)))
            ranges.append((low, high, len(found.group(1))))
        parts[index] = ranges
    return parts


def names_in(parts):
    """How many names a pattern expands to, without expanding it."""
    count = 1
    for ranges in parts[1::2]:
        count *= sum(high - low + 1 for low, high, _ in ranges)
    return count


def expand_hostlist(text, bound=MAX_TASKS):
    """Slurm's compressed host list ('node[01-03,7],gpu1') as names, in its order, as
    `scontrol show hostnames` prints them (each range keeps its zero padding). A list that names
    more than `bound` hosts is refused before it is expanded."""
    patterns = [pattern_parts(pattern, text) for pattern in host_patterns(text)]
    total = sum(names_in(parts) for parts in patterns)
    if total > bound:
        raise LayoutError("SLURM_STEP_NODELIST=%s names %d hosts, more than the %d that a step "
                          "may have here" % (shown(text), total, bound))
    names = []
    for parts in patterns:
        choices = [[parts[0]]]
        for ranges, literal in zip(parts[1::2], parts[2::2]):
            choices.append([str(number).zfill(digits) for low, high, digits in ranges
                            for number in range(low, high + 1)])
            choices.append([literal])
        names += ["".join(pieces) for pieces in itertools.product(*choices)]
    return names


def expand_tasks_per_node(text, bound=MAX_TASKS):
    """'2(x3),1' -> [2, 2, 2, 1]: tasks on each node of the step, in the node list's order."""
    items = []
    for item in text.split(","):
        found = REPEATED_COUNT.fullmatch(item)
        if not found or int(found.group(1)) == 0 or found.group(2) == "0":
            raise LayoutError("SLURM_STEP_TASKS_PER_NODE=%s is not Slurm's tasks per node (such "
                              "as 2(x3),1)" % shown(text))
        items.append((int(found.group(1)), int(found.group(2) or 1)))
    if sum(count * times for count, times in items) > bound:
        raise LayoutError("SLURM_STEP_TASKS_PER_NODE=%s gives more than the %d tasks that a "
                          "step may have here" % (shown(text), bound))
    return [count for count, times in items for _ in range(times)]


def number(environ, name, default=None):
    value = environ.get(name, default)
    if value is None:
        raise LayoutError("%s is not set: start every task with srun (see "
                          "Cluster-Engines/slurm/train.sbatch)" % name)
    if not re.fullmatch("[0-9]+", value):
        raise LayoutError("%s=%s must be a whole number, 0 or more" % (name, shown(value)))
    return int(value)


def cluster_from_slurm(environ):
    """(ps hosts, worker hosts, job name, task index) of this task of the job step, as the
    cluster flags take them; raises LayoutError for a step that cannot be laid out."""
    if not environ.get("SLURM_JOB_ID"):
        raise LayoutError("not a task of a Slurm job (no SLURM_JOB_ID): submit "
                          "Cluster-Engines/slurm/train.sbatch with sbatch; without Slurm, give "
                          "the example its cluster flags")
    if not environ.get("SLURM_STEP_NODELIST"):
        raise LayoutError("this is a job's batch script, not a task of a job step: start every "
                          "task with srun (see Cluster-Engines/slurm/train.sbatch)")
    job_id, rank = number(environ, "SLURM_JOB_ID"), number(environ, "SLURM_PROCID")
    local, ps_tasks = number(environ, "SLURM_LOCALID"), number(environ, "SLURM_PS_TASKS", "1")
    node = environ.get("SLURMD_NODENAME") or ""
    nodes = expand_hostlist(environ["SLURM_STEP_NODELIST"])
    counts = expand_tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE", ""))
    if len(nodes) != len(counts):
        raise LayoutError("SLURM_STEP_NODELIST=%s has %d nodes and SLURM_STEP_TASKS_PER_NODE=%s "
                          "counts %d: they do not match"
                          % (shown(environ["SLURM_STEP_NODELIST"]), len(nodes),
                             shown(environ["SLURM_STEP_TASKS_PER_NODE"]), len(counts)))
    if max(counts) > TASKS_PER_NODE:
        raise LayoutError("a node runs %d tasks of the step, more than the %d ports a job has "
                          "on a node: give srun fewer --ntasks-per-node"
                          % (max(counts), TASKS_PER_NODE))
    placement = [(name, index) for name, count in zip(nodes, counts) for index in range(count)]
    if not 0 < ps_tasks < len(placement):
        raise LayoutError("SLURM_PS_TASKS=%d of %d tasks leaves no worker or no ps: give srun "
                          "--ntasks more than SLURM_PS_TASKS" % (ps_tasks, len(placement)))
    if not rank < len(placement) or placement[rank] != (node, local):
        raise LayoutError("task %d runs on %s as local task %d, not where block distribution "
                          "puts it: start the tasks with srun --distribution=block"
                          % (rank, shown(node), local))
    first = FIRST_PORT + job_id % JOB_SLOTS * TASKS_PER_NODE
    hosts = ["%s:%d" % (name, first + index) for name, index in placement]
    job_name, task_index = ("ps", rank) if rank < ps_tasks else ("worker", rank - ps_tasks)
    return ",".join(hosts[:ps_tasks]), ",".join(hosts[ps_tasks:]), job_name, task_index


class OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, "slurm_task: error: %s\n" % message)


def main(argv, environ=os.environ):
    parser = OneLineErrorParser(
        description=__doc__.split("\n\n")[0],
        usage="srun python Cluster-Engines/slurm/slurm_task.py EXAMPLE.py [flags...]")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    if not os.path.isfile(options.script):
        parser.error("%s is not a file: name the example from the directory srun starts in "
                     "(the repository root)" % options.script)
    given = sorted({arg.partition("=")[0] for arg in options.args
                    if arg.partition("=")[0] in CLUSTER_FLAGS})
    if given:
        parser.error("%s: the step's layout gives every task its cluster flags; leave them out"
                     % ", ".join(given))
    try:
        ps_hosts, worker_hosts, job_name, task_index = cluster_from_slurm(environ)
    except LayoutError as refusal:
        parser.error(str(refusal))
    command = [sys.executable, options.script, "--job_name", job_name,
               "--task_index", str(task_index), "--ps_hosts", ps_hosts,
               "--worker_hosts", worker_hosts] + options.args
    environ.pop("TF_CONFIG", None)  # the flags say where this task is; nothing else may
    sys.stdout.flush()
    try:
        os.execve(sys.executable, command, environ)
    except OSError as error:  # e.g. E2BIG: a cluster too large to pass in one argument
        parser.error("cannot start %s with the cluster flags of %d tasks (%s)"
                     % (options.script, len((ps_hosts + "," + worker_hosts).split(",")),
                        error.strerror))


if __name__ == "__main__":
    main(sys.argv[1:])
