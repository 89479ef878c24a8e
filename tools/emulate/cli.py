"""python -m tools.emulate: run one example on an emulated cluster, measure the largest cluster
this machine holds (--capacity), or list the scenarios (--list)."""
import argparse
import json
import os
import signal
import sys

from . import capacity
from .cluster import EmulatedCluster, describe_measured, emulation
from .network import can_make_namespaces
from .scenarios import SCALE, SCENARIOS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog="python -m tools.emulate", description=__doc__.split("\n\n")[0],
        epilog="Flags after the script go to every task of the example.")
    parser.add_argument("--list", action="store_true", help="the scenarios, with their sources")
    parser.add_argument("--capacity", action="store_true",
                        help="run the script (default %s) with each --workers count and say the "
                             "largest whose workers keep their compute time within %d%%"
                             % (capacity.DEFAULT_SCRIPT, 100 * capacity.TOLERANCE))
    parser.add_argument("--scenario", default="datacenter", choices=sorted(SCENARIOS))
    parser.add_argument("--workers", default=None,
                        help="workers (default 2); with --capacity a comma-separated sweep "
                             "(default 1,2,4,8,16,32)")
    parser.add_argument("--scale", type=float, default=SCALE,
                        help="F: compute times and link rates ÷ F, bytes ÷ F²")
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the heterogeneous scenario's draw of compute times")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds the run may take; then every task is stopped")
    parser.add_argument("--record", help="write the settings and measurements to this JSON file")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter that runs the example (default: this one)")
    parser.add_argument("script", nargs="?", help="the example, e.g. Hogwild/Hogwild.py")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    if not options.scale > 0:
        parser.error("--scale must be positive, got %g" % options.scale)
    try:
        counts = [int(n) for n in (options.workers or "").split(",") if n.strip()]
    except ValueError:
        parser.error("--workers: '%s' is not a comma-separated list of integers"
                     % options.workers)
    if counts and min(counts) < 1:
        parser.error("--workers: every count must be at least 1")
    if not options.capacity and len(counts) > 1:
        parser.error("--workers: one count (a sweep is for --capacity)")
    options.counts = counts or ([1, 2, 4, 8, 16, 32] if options.capacity else [2])
    if options.list:
        return parser, options
    options.script = options.script or (capacity.DEFAULT_SCRIPT if options.capacity else None)
    if not options.script:
        parser.error("which example? e.g. python -m tools.emulate Hogwild/Hogwild.py")
    options.script = os.path.join(ROOT, options.script) if not os.path.isfile(
        options.script) else os.path.abspath(options.script)
    if not os.path.isfile(options.script):
        parser.error("no such example: %s" % options.script)
    reason = can_make_namespaces()
    if reason:
        parser.error("cannot emulate a cluster here: %s" % reason)
    return parser, options


def list_scenarios(scale):
    for name, scenario in SCENARIOS.items():
        detail = scenario.describe()
        print("%s: %s" % (name, detail["title"]))
        print("  model %s, %.1fM parameters (%s)" % (detail["model"], detail["parameters"] / 1e6,
                                                     detail["model_source"]))
        print("  compute %.3f s per step, %s (%s)" % (detail["compute"]["mean_seconds"],
                                                    detail["compute"]["kind"],
                                                    detail["compute"]["source"]))
        print("  links %g Gb/s (%s)" % (detail["link_bits_per_second"] / 1e9,
                                       detail["link_source"]))
        emulated = scenario.emulated(1, 1, scale)
        print("  emulated at F = %g: %.1f ms per step, %.1f Mb/s, θ %.3f MiB more" % (
            scale, 1e3 * emulated["compute_seconds"][0], emulated["link_bits_per_second"] / 1e6,
            emulated["payload_mb"]))
    return 0


def run_one(options):
    """The example on the emulated cluster, its output shown; then configured against
    measured."""
    settings = emulation(options.script, options.scenario, options.counts[0], options.scale,
                         options.seed)
    cluster = EmulatedCluster(options.script, settings, args=options.script_args,
                              python=options.python, echo=True)
    signal.signal(signal.SIGTERM, lambda signum, frame: cluster.interrupt())
    signal.signal(signal.SIGINT, lambda signum, frame: cluster.interrupt())
    try:
        cluster.start()
        finished = cluster.wait(options.timeout, stop_on_failure=False)
    except KeyboardInterrupt:
        print("[emulate] interrupted: every task stopped, the namespaces deleted",
              file=sys.stderr)
        return 130
    finally:
        cluster.stop()
    measured = cluster.measured()
    for text in describe_measured(settings, measured):
        print("[emulate] " + text)
    if options.record:
        with open(options.record, "w") as out:
            json.dump({"emulated": settings, "measured": measured,
                       "results": cluster.results()}, out, indent=1)
    codes = cluster.returncodes()
    if not finished:
        print("[emulate] not finished after %g s (--timeout)" % options.timeout, file=sys.stderr)
        return 1
    return 0 if set(codes.values()) == {0} else 1


def main(argv=None):
    parser, options = parse_arguments(sys.argv[1:] if argv is None else argv)
    if options.list:
        return list_scenarios(options.scale)
    if options.capacity:
        def interrupted(signum, frame):
            raise KeyboardInterrupt
        signal.signal(signal.SIGTERM, interrupted)
        _, runs = capacity.sweep(options.script, options.scenario, options.counts,
                                    options.scale, options.python, options.record,
                                    say=lambda text: print("[emulate] " + text, flush=True))
        print("\n" + capacity.markdown(runs, " ".join(["python -m tools.emulate"] + list(
            sys.argv[1:] if argv is None else argv))))
        return 0
    return run_one(options)
