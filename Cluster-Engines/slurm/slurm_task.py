"""Start one task of an example with the cluster flags that Slurm's environment gives it.

train.sbatch runs this, once per Slurm task, for an example that does not read Slurm's variables
itself: it works out --job_name, --task_index, --ps_hosts and --worker_hosts exactly as the
examples' cluster_from_flags does (the same code, from ../cluster_from_flags.py), then replaces
itself with the example (same process, so Slurm signals and counts the example itself).

    srun python Cluster-Engines/slurm/slurm_task.py EXAMPLE.py [flags...]
"""
import argparse
import json
import os
import socket
import sys

RESOLUTION = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "cluster_from_flags.py")


class OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, "slurm_task: error: %s\n" % message)


def main(argv):
    parser = OneLineErrorParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    resolution = {"os": os, "json": json, "socket": socket}
    exec(compile(open(RESOLUTION).read(), RESOLUTION, "exec"), resolution)
    ps_hosts, worker_hosts, job_name, task_index = resolution["cluster_from_slurm"](parser,
                                                                                   os.environ)
    command = [sys.executable, options.script, "--job_name", job_name,
               "--task_index", str(task_index), "--ps_hosts", ps_hosts,
               "--worker_hosts", worker_hosts] + options.args
    sys.stdout.flush()
    os.execv(sys.executable, command)


if __name__ == "__main__":
    main(sys.argv[1:])
