"""The command line: flags, the settings they make, and the three things it does (run and
report, --plan, --replot)."""
import argparse
import json
import os
import signal
import sys

from . import __doc__ as OVERVIEW
from . import plan, report
from .run import RAW_FILE, clock, machine_description, run_all, save_raw
from emulate import SCALE, SCENARIOS, can_make_namespaces  # (run put tools/ on the path)

DEFAULT_OUTPUT = os.path.join(plan.ROOT, "comparison")
QUICK_ALGORITHMS = ["Hogwild", "Synchronous-SGD", "AGN"]

# Both modes' defaults; any flag given on the command line wins.
FULL = {"budget": 3000, "repeats": 3, "workers": None, "straggler_delay": 0.05,
        "run_timeout": 900.0, "algorithms": None}
QUICK = {"budget": 600, "repeats": 1, "workers": [1, 2], "straggler_delay": 0.05,
         "run_timeout": 300.0, "algorithms": QUICK_ALGORITHMS}
# --emulate: every algorithm on the scenarios' clusters, each worker computing as many
# minibatches (equal work per worker: the same emulated compute time), enough for most
# algorithms to reach the target (0.92: the one-process baseline's ~150th step), so that the
# time to it is what differs.
EMULATED = {"budget": 150, "repeats": 2, "workers": [2, 4], "straggler_delay": 0.05,
            "run_timeout": 900.0, "algorithms": None, "target": 0.92}


def parse_list(text, kind=str):
    return [kind(item.strip()) for item in text.split(",") if item.strip()]


def default_worker_counts(cores):
    """1, 2, 4 (and 8) workers, as far as the cores allow one core per task (the ps included);
    at least 1 and 2."""
    return [workers for workers in (1, 2, 4, 8) if workers <= 2 or workers + 1 <= cores]


def add_plan_flags(parser):
    """What runs: algorithms, worker counts, budgets, repeats."""
    parser.add_argument("--quick", action="store_true",
                        help="few algorithms (%s), budget %d, 1 repeat, workers 1,2: a few "
                             "minutes on 2 cores" % (",".join(QUICK_ALGORITHMS),
                                                     QUICK["budget"]))
    parser.add_argument("--only", help="comma-separated algorithm folders, e.g. "
                                       "Hogwild,Synchronous-SGD (the baseline always runs)")
    parser.add_argument("--budget", type=int,
                        help="minibatch gradients applied to θ per run, or θ updates made at "
                             "equal updates, or (--emulate) minibatches each worker computes "
                             "(full: %d, quick: %d, emulated: %d)"
                             % (FULL["budget"], QUICK["budget"], EMULATED["budget"]))
    parser.add_argument("--no_equal_updates", action="store_true",
                        help="skip the equal-updates table (synchronous runs with N× the "
                             "minibatches, so that they make as many θ updates)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0, help="the same for every run")
    parser.add_argument("--repeats", type=int, help="runs per configuration (full: 3, quick: 1)")
    parser.add_argument("--workers", help="comma-separated worker counts (full: 1,2,4 as the "
                                          "cores allow; quick: 1,2)")
    parser.add_argument("--log_every", type=int,
                        help="local steps between two test evaluations (default: budget / 40)")
    parser.add_argument("--straggler_delay", type=float,
                        help="seconds the straggler sleeps after each step (default %g)"
                             % FULL["straggler_delay"])
    parser.add_argument("--no_straggler", action="store_true", help="skip the straggler section")
    parser.add_argument("--straggler_algorithms",
                        help="comma-separated algorithms of the straggler section (default: "
                             "every one compared)")


def add_emulation_flags(parser):
    """--emulate: the same comparison on emulated clusters of real settings."""
    parser.add_argument("--emulate", metavar="SCENARIO[:ALGORITHM+...][,...]",
                        help="run every configuration on an emulated cluster (tools/emulate, "
                             "needs root): %s; after a scenario, ':' and '+'-separated "
                             "algorithms narrow --only for it (e.g. heterogeneous:Synchronous-"
                             "SGD+Hogwild); budget %d minibatches per worker (equal work per "
                             "worker), %d "
                             "repeats, workers %s, target %g, unless given" % (
                                 ", ".join(SCENARIOS), EMULATED["budget"], EMULATED["repeats"],
                                 ",".join(map(str, EMULATED["workers"])), EMULATED["target"]))
    parser.add_argument("--scale", type=float, default=SCALE,
                        help="with --emulate: the factor F that divides time and link rates "
                             "(bytes: F²)")


def add_output_flags(parser):
    """How it runs and what it writes."""
    parser.add_argument("--target", type=float, help="target test accuracy (default 0.95); with "
                                                     "--replot, recomputed from the curves")
    parser.add_argument("--run_timeout", type=float, help="seconds one run may take")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter that runs the examples (default: this one)")
    parser.add_argument("--output", help="output folder (default: comparison/)")
    parser.add_argument("--replot", metavar="DIR",
                        help="redraw tables, plots and findings from DIR/raw.json; runs nothing")
    parser.add_argument("--readme", action="store_true",
                        help="with --emulate, or --replot of an emulated comparison: rewrite "
                             "the emulated column of README.md's \"Choosing an algorithm\" "
                             "from this raw.json (the committed results/emulated/ is shown so)")
    parser.add_argument("--resume", action="store_true",
                        help="add to --output's raw.json (same budget, batch, seed, repeats, "
                             "target, scale): keep its finished runs and run only the missing "
                             "or failed ones, of the plans of both commands")
    parser.add_argument("--plan", action="store_true",
                        help="print what would run (configurations, --train_steps) and write "
                             "raw.json with the plan and no runs; runs nothing")
    parser.add_argument("--verbose", action="store_true", help="show every task's output")


def parse_arguments(argv):
    paragraphs = OVERVIEW.strip().split("\n\n")
    parser = argparse.ArgumentParser(prog="python -m tools.compare", description=paragraphs[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(paragraphs[1:-1]))  # the last: the modules
    add_plan_flags(parser)
    add_emulation_flags(parser)
    add_output_flags(parser)
    options = parser.parse_args(argv)
    for name in ("budget", "batch_size", "repeats", "log_every"):
        value = getattr(options, name)
        if value is not None and value < 1:
            parser.error("--%s must be a positive integer, got %d" % (name, value))
    if options.target is not None and not 0 < options.target <= 1:
        parser.error("--target must be in (0, 1], got %g" % options.target)
    if options.straggler_delay is not None and not options.straggler_delay > 0:
        parser.error("--straggler_delay must be positive, got %g" % options.straggler_delay)
    if options.emulate:
        entries = [entry.partition(":") for entry in parse_list(options.emulate)]
        options.emulate = [name for name, _, _ in entries]
        options.emulate_only = {name: parse_list(algorithms, str.strip) if algorithms else None
                                for name, _, algorithms in entries}
        unknown = [name for name in options.emulate if name not in SCENARIOS]
        if unknown or not options.emulate:
            parser.error("--emulate: unknown scenario(s) %s; known: %s" % (
                ", ".join(unknown) or "(none given)", ", ".join(SCENARIOS)))
        for names in filter(None, options.emulate_only.values()):
            check_names(parser, "--emulate", [name for part in names
                                              for name in part.split("+")])
        if options.quick:
            parser.error("--emulate and --quick: choose one (--emulate takes --only, --workers, "
                         "--budget, --repeats)")
    if not options.scale > 0:
        parser.error("--scale must be positive, got %g" % options.scale)
    if options.workers:
        try:
            options.workers = sorted(set(parse_list(options.workers, int)))
        except ValueError:
            parser.error("--workers: '%s' is not a comma-separated list of integers"
                         % options.workers)
        if not options.workers or min(options.workers) < 1:
            parser.error("--workers: every count must be at least 1")
    return parser, options


def check_names(parser, flag, names):
    unknown = [name for name in names if name not in plan.BY_NAME]
    if unknown:
        parser.error("%s: unknown algorithm(s) %s; known: %s" % (
            flag, ", ".join(unknown), ", ".join(a.name for a in plan.ALGORITHMS[1:])))


def chosen_algorithms(options, parser, mode):
    """The algorithms to compare (the baseline always), from --only or the mode."""
    algorithms = plan.available_algorithms()
    wanted = parse_list(options.only) if options.only else mode["algorithms"]
    if wanted:
        check_names(parser, "--only", wanted)
        algorithms = [a for a in algorithms if a.name in wanted or a.family == "baseline"]
    if options.straggler_algorithms:
        check_names(parser, "--straggler_algorithms", parse_list(options.straggler_algorithms))
    return algorithms


def chosen_sections(options):
    """The report's sections, hence the budgets the plan runs."""
    if options.emulate:
        return [plan.EQUAL_WORK]
    sections = [plan.EQUAL_MINIBATCHES]
    if not options.no_equal_updates:
        sections.append(plan.EQUAL_UPDATES)
    if not options.no_straggler:
        sections.append(plan.STRAGGLER)
    return sections


def settings_from(options, parser, argv):
    """The settings of a new comparison: the mode's defaults, then the flags given."""
    mode = QUICK if options.quick else EMULATED if options.emulate else FULL
    budget = options.budget or mode["budget"]
    emulated = {"emulate": {
        "scenarios": options.emulate, "scale": options.scale,
        "only": {name: names[0].split("+") for name, names in options.emulate_only.items()
                 if names},
        "details": {name: SCENARIOS[name].describe() for name in options.emulate}}
    } if options.emulate else {}
    return chosen_algorithms(options, parser, mode), dict(emulated, **{
        "mode": "quick" if options.quick else "emulated" if options.emulate else "full",
        "budget": budget,
        "batch_size": options.batch_size, "seed": options.seed,
        "repeats": options.repeats or mode["repeats"],
        "workers": options.workers or mode["workers"] or default_worker_counts(os.cpu_count()),
        "target": options.target if options.target is not None else mode.get("target", 0.95),
        "log_every": options.log_every or max(1, budget // 40),
        "sections": chosen_sections(options),
        "straggler_algorithms": (parse_list(options.straggler_algorithms)
                                 if options.straggler_algorithms else None),
        "straggler_delay": options.straggler_delay or mode["straggler_delay"],
        "run_timeout": options.run_timeout or mode["run_timeout"],
        "python": options.python,
        "command": " ".join(["python -m tools.compare"] + list(argv))})


def scaling_tables(rows):
    return "\n\n".join(report.markdown_table([row for row in rows if row["section"] == section])
                       for section in (plan.EQUAL_MINIBATCHES, plan.EQUAL_UPDATES)
                       if any(row["section"] == section for row in rows))


def replot(directory, target=None):
    """Tables, plots and findings again from DIR/raw.json (optionally for another target)."""
    with open(os.path.join(directory, RAW_FILE)) as source:
        raw = json.load(source)
    if target is not None:
        raw["settings"]["target"] = target
    rows, found = report.write_report(raw, directory)
    print(scaling_tables(rows) + "\n\n" + found)
    print("[compare] redrawn from %s" % os.path.join(directory, RAW_FILE))
    return raw


def write_readme_column(raw):
    """README.md's emulated column from raw (an emulated comparison)."""
    from .emulated import with_readme_column
    path = os.path.join(plan.ROOT, "README.md")
    with open(path) as source:
        text = source.read()
    with open(path, "w") as out:
        out.write(with_readme_column(text, raw))
    print("[compare] README.md's emulated column rewritten from this comparison")


# What a resumed comparison must share with the one it adds to (the rest, such as the
# algorithms, scenarios and worker counts, may grow).
SHARED_SETTINGS = ["mode", "budget", "batch_size", "seed", "repeats", "target", "log_every",
                   "straggler_delay"]


def resumed(parser, raw, output):
    """raw of this command merged into output's raw.json: the plans' union, the earlier finished
    runs, and the earlier settings, widened to this command's scenarios and algorithms."""
    path = os.path.join(output, RAW_FILE)
    try:
        with open(path) as source:
            earlier = json.load(source)
    except (OSError, ValueError) as error:
        parser.error("--resume: cannot read %s (%s)" % (path, error))
    settings, before = raw["settings"], earlier["settings"]
    differ = ["%s %s there, %s here" % (name, before.get(name), settings.get(name))
              for name in SHARED_SETTINGS if before.get(name) != settings.get(name)]
    scales = [(s.get("emulate") or {}).get("scale") for s in (before, settings)]
    if scales[0] != scales[1]:
        differ.append("scale %s there, %s here" % tuple(scales))
    if differ:
        parser.error("--resume: %s was made with other settings (%s): give the same ones, or "
                     "another --output" % (path, "; ".join(differ)))
    if settings.get("emulate"):
        emulate, wider = before["emulate"], settings["emulate"]
        for name in wider["scenarios"]:
            if name not in emulate["scenarios"]:
                emulate["scenarios"].append(name)
                emulate["details"][name] = wider["details"][name]
            known, added = emulate["only"].get(name, []), wider["only"].get(name)
            if name in emulate["only"] and added:
                emulate["only"][name] = known + [a for a in added if a not in known]
            else:  # (no list: every algorithm)
                emulate["only"].pop(name, None)
    before["workers"] = sorted(set(before["workers"]) | set(settings["workers"]))
    before.setdefault("resumed", []).append({key: settings[key] for key in ("command",
                                                                           "machine")})
    before["python"], before["run_timeout"] = settings["python"], settings["run_timeout"]
    keys = {config["key"] for config in earlier["plan"]}
    merged = earlier["plan"] + [config for config in raw["plan"] if config["key"] not in keys]
    return {"settings": before, "plan": merged,
            "runs": [run for run in earlier["runs"] if run["ok"]]}


def announce(raw, output):
    """What is about to run, and what this checkout lacks."""
    for name in plan.unknown_example_folders():
        print("[compare] note: %s/ has a run.sh but is not in this tool's list; not compared"
              % name, flush=True)
    missing = [a.name for a in plan.ALGORITHMS if not a.exists()]
    if missing:
        print("[compare] note: not in this checkout yet, skipped: %s" % ", ".join(missing))
    settings, configs = raw["settings"], raw["plan"]
    kept = len(raw["runs"])
    print("[compare] %s mode: %d configuration(s) × %d repeat(s) = %d runs%s, budget %d (%s), "
          "batch %d, on %d core(s) (TensorFlow %s); results in %s" % (
              settings["mode"], len(configs), settings["repeats"],
              len(configs) * settings["repeats"],
              " (%d kept from raw.json, %d to run)" % (
                  kept, len(configs) * settings["repeats"] - kept) if kept else "",
              settings["budget"],
              ", ".join(section for section in settings["sections"]), settings["batch_size"],
              settings["machine"]["cores"], settings["machine"]["tensorflow"], output), flush=True)


def print_plan(raw):
    for config in raw["plan"]:
        print("[compare]   %-62s --train_steps %5d  (%s)" % (
            plan.describe(config), config["train_steps"], ", ".join(config["sections"])))


def run_and_report(raw, output, echo):
    """Run the plan, then write the report; an interrupted run keeps what it measured."""
    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    try:
        elapsed = run_all(raw, output, echo=echo)
    except KeyboardInterrupt:
        save_raw(raw, output)
        print("[compare] interrupted: every cluster was stopped; %d finished run(s) kept in %s"
              % (len(raw["runs"]), os.path.join(output, RAW_FILE)), file=sys.stderr)
        return 130
    rows, found = report.write_report(raw, output)
    print("\n" + report.markdown_table(rows) + "\n\n" + found)
    print("\n[compare] %d runs in %s; %s, %s, %s and the plots in %s" % (
        len(raw["runs"]), clock(elapsed), report.MARKDOWN_FILE, report.CSV_FILE, RAW_FILE,
        output))
    return 1 if any(not run["ok"] for run in raw["runs"]) else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, options = parse_arguments(argv)
    if options.replot:
        if not os.path.isfile(os.path.join(options.replot, RAW_FILE)):
            parser.error("--replot: no %s in %s" % (RAW_FILE, options.replot))
        raw = replot(options.replot, options.target)
        if options.readme:
            if raw["settings"]["mode"] != "emulated":
                parser.error("--readme: %s is not an emulated comparison" % options.replot)
            write_readme_column(raw)
        return 0
    if options.readme and not options.emulate:
        parser.error("--readme needs --emulate (or --replot DIR of an emulated comparison)")
    algorithms, settings = settings_from(options, parser, argv)
    if options.emulate and not options.plan and can_make_namespaces():
        parser.error("--emulate cannot run here: %s" % can_make_namespaces())
    output = os.path.abspath(options.output or DEFAULT_OUTPUT)
    os.makedirs(output, exist_ok=True)
    settings["machine"] = machine_description(settings["python"])
    raw = {"settings": settings, "plan": plan.build_plan(algorithms, settings), "runs": []}
    if options.resume:
        raw = resumed(parser, raw, output)
    announce(raw, output)
    if options.plan:
        print_plan(raw)
        save_raw(raw, output)
        return 0
    code = run_and_report(raw, output, options.verbose)
    if options.readme and code != 130:
        write_readme_column(raw)
    return code
