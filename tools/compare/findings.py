"""What we found: sentences chosen by conditions on the numbers, none typed by hand.

Every value is given with its min–max over repeats, and every claim that one configuration did
better than another is made only where metrics.order says it held in every repeat; otherwise
the sentence says "within noise". Each comparison names the measure it is made on and the
budget of the table it comes from.
"""
from . import plan
from .metrics import (MEASURE_WORDS, complete, costs, mean, order, ratios,
                      straggler_measure, straggler_pairs, values)

JIN = "Jin et al. 2016 (\"How to scale distributed deep learning?\"), where asynchronous " \
      "methods win at small scale"
SCALING_CLAIM = "the claim that synchronous training scales further"
CHEN = "Chen et al. 2016 (\"Revisiting Distributed Synchronous SGD\"), where backup workers " \
       "hide stragglers"
FOLKLORE = "the folklore that asynchronous training does not wait for slow workers"
BUDGET_WORDS = {
    plan.EQUAL_MINIBATCHES: "At equal minibatches (synchronous runs make N× fewer θ updates):",
    plan.EQUAL_UPDATES: "At equal updates (synchronous runs apply N× more minibatches):"}


def span(numbers, pattern="%.1f", unit=" s", prefix=""):
    """A mean and its range: '8.1 s (7.9–8.3 over 3 repeats)', '8.1 s (one repeat)'."""
    text = prefix + pattern % mean(numbers) + unit
    if len(numbers) == 1:
        return text + " (one repeat)"
    return "%s (%s–%s over %d repeats)" % (text, pattern % min(numbers), pattern % max(numbers),
                                          len(numbers))


def who(row):
    if row["family"] == "baseline":
        return "the one-process baseline"
    return "%s with %d worker%s" % (plan.label(row), row["workers"],
                                    "" if row["workers"] == 1 else "s")


def first_letter_up(sentence):
    return sentence[0].upper() + sentence[1:]


def lower(first, second):
    """True if `first` was below `second` in every repeat, False if above, None if within
    noise (metrics.order)."""
    return {"<": True, ">": False, None: None}[order(first, second)]


def bears_on(outcome, claim):
    """How a result bears on a published claim: outcome True (as claimed), False, or None."""
    return {True: "agrees with ", False: "contradicts ",
            None: "is within noise, so neither supports nor contradicts "}[outcome] + claim


def findings(rows, settings, runs):
    """The report's list of findings, in Markdown."""
    if not any(row["runs_ok"] for row in rows):
        return ("No run of the comparison finished successfully, so there is nothing to "
                "conclude yet (see the failed runs below, or run it).")
    lines = bullets(caveats(rows, settings, runs))
    for section in (plan.EQUAL_MINIBATCHES, plan.EQUAL_UPDATES):
        table = [row for row in rows if row["section"] == section and row["runs_ok"]]
        if table:
            lines += ["- " + BUDGET_WORDS[section]]
            lines += bullets(section_findings(table, settings), indent="  ")
    scaling = [row for row in rows if row["section"] == plan.EQUAL_MINIBATCHES]
    lines += bullets([scales_further(scaling, settings["repeats"]), stability(scaling)]
                     + straggler_findings(rows, settings))
    return "\n".join(lines)


def bullets(sentences, indent=""):
    """A Markdown list of the sentences that apply (None: the numbers did not allow one)."""
    return [indent + "- " + sentence for sentence in sentences if sentence]


def caveats(rows, settings, runs):
    """What weighs on every number: one repeat, start-up, other work on the machine."""
    notes = []
    if settings["repeats"] < 2:
        notes.append("With one repeat per configuration every comparison below is within "
                     "noise, and stability across repeats was not measured (use --repeats 3 or "
                     "more).")
    runs_shown = {row["key"]: row for row in rows}.values()  # a run shown in two tables: once
    starts = [row for row in runs_shown if row["family"] != "baseline"
              and row["first_evaluation"] and row["wall_seconds"]]
    share = mean([row["first_evaluation"] / row["wall_seconds"] for row in starts])
    if share and share > 0.5:
        notes.append("Start-up dominated this budget: the first test evaluation came on average "
                     "%.0f%% of the way through a distributed run's wall time (TensorFlow's "
                     "import and the cluster's start), so a larger --budget tells more about "
                     "training itself." % (100 * share))
    loads = [run["load_average"] for run in runs if "load_average" in run]
    cores = settings["machine"]["cores"]
    if loads and mean(loads) > cores:
        notes.append("Other work shared the machine (load average %.1f on %d core(s) at the "
                     "end of the runs, on average), so every time here carries that noise."
                     % (mean(loads), cores))
    return notes


def section_findings(table, settings):
    distributed = [row for row in table if row["family"] != "baseline"]
    return [first_to_target(table, settings["target"]),
            against_baseline(table, settings["machine"]["cores"]),
            family_accuracy(distributed), asynchronous_at_small_scale(distributed)]


def best(rows, family, workers, measure, highest=False):
    """The family's best row at this worker count on a measure every one of its runs has
    (backup-worker variants aside: they answer another question)."""
    candidates = [row for row in rows if row["family"] == family and row["workers"] == workers
                  and not (row["aggregated"] and row["aggregated"] < row["workers"])
                  and complete(row, measure)]
    pick = max if highest else min
    return pick(candidates, key=lambda row: row[measure], default=None)


def first_to_target(table, target):
    """Who reached the target first, among the configurations that reached it in every run."""
    reached = sorted((row for row in table if complete(row, "time_to_target")),
                     key=lambda row: row["time_to_target"])
    partly = sum(1 for row in table if row["reached"] and not complete(row, "time_to_target"))
    others = " (%d more reached it in some runs only)" % partly if partly else ""
    goal = "%.2f test accuracy" % target
    if not reached:
        return ("No configuration reached %s in every run%s; raise --budget or lower --target "
                "for a time-to-accuracy comparison (the other columns stand)." % (goal, others))
    leader, times = reached[0], values(reached[0], "time_to_target")
    if len(reached) == 1:
        return "Only %s reached %s in every run, after %s%s." % (who(leader), goal,
                                                                 span(times), others)
    runner, then = reached[1], values(reached[1], "time_to_target")
    if order(times, then) == "<":
        return first_letter_up("%s reached %s first, after %s; the next, %s, after %s%s." % (
            who(leader), goal, span(times), who(runner), span(then), others))
    return first_letter_up("%s and %s were first to %s, within noise of each other: %s "
                           "against %s%s." % (who(leader), who(runner), goal, span(times),
                                              span(then), others))


def against_baseline(table, cores):
    """The fastest distributed configuration against the one process, on time to target."""
    baseline = next((row for row in table if row["family"] == "baseline"), None)
    fastest = min((row for row in table if row["family"] != "baseline"
                   and complete(row, "time_to_target")),
                  key=lambda row: row["time_to_target"], default=None)
    if not fastest or not baseline or not complete(baseline, "time_to_target"):
        return None
    mine, theirs = values(fastest, "time_to_target"), values(baseline, "time_to_target")
    speedups = ratios(baseline["per_repeat"]["time_to_target"],
                      fastest["per_repeat"]["time_to_target"])
    outcome = order(mine, theirs)
    verdict = {None: "within noise", "<": "faster in every repeat",
               ">": "slower in every repeat"}[outcome]
    if outcome == ">" and fastest["workers"] + 1 > cores:
        verdict += (" (its ps and workers share %d core(s): a cluster adds communication, and "
                    "its extra workers add no compute)" % cores)
    speedup = "; speed-up %s" % span(speedups, "%.2f", "", "×") if speedups else ""
    return ("The fastest distributed configuration to the target, %s, took %s against %s for "
            "the one process: %s%s." % (who(fastest), span(mine), span(theirs), verdict, speedup))


def family_accuracy(distributed):
    """The best final accuracy of each family at the largest worker count: the budget's unit
    decides how far a synchronous run gets, so this is where the two tables differ most."""
    counts = sorted({row["workers"] for row in distributed if row["workers"] >= 2})
    if not counts:
        return None
    sync, async_ = (best(distributed, family, counts[-1], "final_accuracy", highest=True)
                    for family in ("synchronous", "asynchronous"))
    if not sync or not async_:
        return None
    mine, theirs = values(sync, "final_accuracy"), values(async_, "final_accuracy")
    relation = {"<": "below", ">": "above", None: "within noise of"}[order(mine, theirs)]
    return ("At %d workers the best final test accuracy of the synchronous family, %s's %s, "
            "was %s the asynchronous family's best, %s's %s." % (
                counts[-1], plan.label(sync), span(mine, "%.4f", ""), relation,
                plan.label(async_), span(theirs, "%.4f", "")))


def asynchronous_at_small_scale(distributed):
    """Jin et al.: at the fewest workers (2 or more), the fastest of each family to the target."""
    small = min((row["workers"] for row in distributed if row["workers"] >= 2), default=None)
    if small is None:
        return None
    sync, async_ = (best(distributed, family, small, "time_to_target")
                    for family in ("synchronous", "asynchronous"))
    if not sync or not async_:
        return ("At %d workers no %s configuration reached the target in every run, so %s was "
                "not tested." % (small, "synchronous" if not sync else "asynchronous", JIN))
    mine, theirs = values(async_, "time_to_target"), values(sync, "time_to_target")
    return ("At %d workers the fastest asynchronous configuration to the target, %s, took %s "
            "against %s for the fastest synchronous one, %s: this %s." % (
                small, plan.label(async_), span(mine), span(theirs), plan.label(sync),
                bears_on(lower(mine, theirs), JIN)))


def family_gains(rows, family, low, high, repeats):
    """Repeat by repeat, the family's best examples/s at `high` workers / at `low` workers."""
    def best_rate(workers, repeat):
        rates = [row["per_repeat"]["examples_per_second"][repeat] for row in rows
                 if row["family"] == family and row["workers"] == workers]
        return max((rate for rate in rates if rate is not None), default=None)
    return ratios([best_rate(high, r) for r in range(repeats)],
                  [best_rate(low, r) for r in range(repeats)])


def scales_further(scaling, repeats):
    """The claim that synchronous training scales further, on throughput."""
    distributed = [row for row in scaling if row["family"] != "baseline" and row["runs_ok"]]
    counts = sorted({row["workers"] for row in distributed})
    if len(counts) < 2:
        return ("Only one worker count was measured, so how each family scales was not tested "
                "(use --workers 1,2,4).")
    low, high = counts[0], counts[-1]
    sync, async_ = (family_gains(distributed, family, low, high, repeats)
                    for family in ("synchronous", "asynchronous"))
    if not sync or not async_:
        return None
    return ("At equal minibatches, from %d to %d workers the best synchronous throughput "
            "(examples/s) grew %s, the best asynchronous %s: this %s." % (
                low, high, span(sync, "%.2f", "", "×"), span(async_, "%.2f", "", "×"),
                bears_on(lower(async_, sync), SCALING_CLAIM)))


def stability(scaling):
    """The narrowest and widest range of final accuracy over repeats (a description of the
    spread, not a claim that one algorithm is steadier: two or three repeats cannot show it)."""
    repeated = [row for row in scaling if row["family"] != "baseline"
                and len(values(row, "final_accuracy")) >= 2]
    if not repeated:
        return None

    def width(row):
        accuracies = values(row, "final_accuracy")
        return max(accuracies) - min(accuracies)
    steady, shaky = min(repeated, key=width), max(repeated, key=width)
    return ("At equal minibatches, the narrowest range of final test accuracy over repeats was "
            "that of %s, %s; the widest that of %s, %s." % (
                who(steady), span(values(steady, "final_accuracy"), "%.4f", ""), who(shaky),
                span(values(shaky, "final_accuracy"), "%.4f", "")))


def straggler_findings(rows, settings):
    """What the straggler cost each configuration, and the two claims about it."""
    pairs = straggler_pairs(rows)
    if not pairs:
        return []
    measure = straggler_measure(pairs)
    changes = []
    for pair in pairs:
        before, after = values(pair["normal"], measure), values(pair["slow"], measure)
        ratio = costs(pair, measure)
        if ratio:
            changes.append("%s ×%s, %s" % (plan.label(pair["slow"]), span(ratio, "%.2f", ""), {
                "<": "slower in every repeat", ">": "faster in every repeat",
                None: "within noise"}[order(before, after)]))
    return ["With the straggler (its section's budget: equal minibatches), the %s changed by: "
            "%s." % (MEASURE_WORDS[measure], "; ".join(changes)),
            backup_workers(pairs, measure), waits_for_stragglers(pairs, measure)]


def backup_workers(pairs, measure):
    """Chen et al.: with the straggler, one backup worker against all workers aggregated."""
    slow = {plan.label(pair["slow"]): pair["slow"] for pair in pairs}
    backup = slow.get("%s (N=%d of %d)" % (plan.BACKUP_ALGORITHM, plan.STRAGGLER_WORKERS - 1,
                                           plan.STRAGGLER_WORKERS))
    full = slow.get(plan.BACKUP_ALGORITHM)
    if not backup or not full or not values(backup, measure) or not values(full, measure):
        return None
    mine, theirs = values(backup, measure), values(full, measure)
    return ("With the straggler, %s's %s was %s with one backup worker against %s with all %d "
            "aggregated: this %s." % (plan.BACKUP_ALGORITHM, MEASURE_WORDS[measure], span(mine),
                                      span(theirs), plan.STRAGGLER_WORKERS,
                                      bears_on(lower(mine, theirs), CHEN)))


def waits_for_stragglers(pairs, measure):
    """The folklore: the straggler costs Synchronous-SGD more than any asynchronous algorithm."""
    full = next((pair for pair in pairs if plan.label(pair["slow"]) == plan.BACKUP_ALGORITHM),
                None)
    asynchronous = [pair for pair in pairs if pair["slow"]["family"] == "asynchronous"
                    and costs(pair, measure)]
    if not full or not costs(full, measure) or not asynchronous:
        return None
    mildest = min(asynchronous, key=lambda pair: mean(costs(pair, measure)))
    mine, theirs = costs(mildest, measure), costs(full, measure)
    return ("The straggler multiplied the %s of %s with all %d aggregated by %s, and that of "
            "the least affected asynchronous algorithm, %s, by %s: this %s." % (
                MEASURE_WORDS[measure], plan.BACKUP_ALGORITHM, plan.STRAGGLER_WORKERS,
                span(theirs, "%.2f", "", "×"), plan.label(mildest["slow"]),
                span(mine, "%.2f", "", "×"), bears_on(lower(mine, theirs), FOLKLORE)))


def jin_family(row):
    """The row's family among plan.JIN_FAMILIES (raw.json of an older plan may lack it)."""
    algorithm = plan.BY_NAME.get(row["algorithm"])
    return row.get("jin_family") or (algorithm.jin if algorithm else None)


def jin_question(rows, settings, section=plan.EQUAL_MINIBATCHES):
    """Jin et al.'s small-scale experiment, at equal minibatches (emulated: at the budget it
    ran): at each worker count, the fastest configuration of each family to the target (mean
    and min–max over repeats), which family was first, and whether that held in every repeat.
    Returns Markdown."""
    fastest, counts, families = jin_fastest(rows, section)
    if not counts or not families:
        return "No family of Jin et al.'s comparison ran, so their question was not asked here."

    def cell(row):
        return "—" if row is None else "%s: %s" % (plan.label(row),
                                                   span(values(row, "time_to_target")))

    lines = ["| Family | %s |" % " | ".join("%d worker%s" % (w, "" if w == 1 else "s")
                                            for w in counts),
             "|---|" + "---|" * len(counts)]
    lines += ["| %s%s | %s |" % (family, "" if family in plan.COMPARED_BY_JIN else " (not in Jin "
                                 "et al.)", " | ".join(cell(fastest[family, w]) for w in counts))
              for family in families]
    sentences = [first_family(fastest, families, workers, settings["target"])
                 for workers in counts]
    sentences.append(jin_verdict(fastest, counts, settings))
    intro = ("Jin et al. 2016 compare four families on how fast they reach a target accuracy as "
             "nodes are added: synchronous all-reduce SGD, asynchronous parameter-server SGD, "
             "elastic averaging and gossip; they report that the asynchronous ones (elastic "
             "averaging, gossip) converge faster at small node counts and that synchronous SGD "
             "scales further. Each cell: the family's fastest example to %.2f test accuracy at "
             "equal minibatches (— where none of its runs reached it, or it does not run with "
             "that many workers), time from launch, mean (min–max over repeats)."
             % settings["target"]).replace("at equal minibatches", "at " + section)
    return "\n\n".join([intro, "\n".join(lines), "\n".join(bullets(sentences))])


def jin_fastest(rows, section):
    """({(family, workers): the family's fastest row to the target, or None}, the worker
    counts, the families that ran), among the rows of the section without backup workers."""
    table = [row for row in rows if row["section"] == section and row["runs_ok"]
             and jin_family(row) and not (row["aggregated"] and row["aggregated"] < row["workers"])]
    counts = sorted({row["workers"] for row in table})
    families = [family for family in plan.JIN_FAMILIES
                if any(jin_family(row) == family for row in table)]
    fastest = {}
    for family in families:
        for workers in counts:
            reached = [row for row in table if jin_family(row) == family
                       and row["workers"] == workers and complete(row, "time_to_target")]
            fastest[family, workers] = min(reached, key=lambda row: row["time_to_target"],
                                           default=None)
    return fastest, counts, families


def first_family(fastest, families, workers, target):
    """Which family was first to the target at this worker count, and by how much."""
    ranked = sorted((fastest[family, workers]["time_to_target"], family)
                    for family in families if fastest[family, workers])
    if not ranked:
        return "At %d worker%s no family reached %.2f in every run." % (
            workers, "" if workers == 1 else "s", target)
    leader = ranked[0][1]
    row = fastest[leader, workers]
    text = "At %d worker%s %s was first to %.2f (%s, %s)" % (
        workers, "" if workers == 1 else "s", leader, target, plan.label(row),
        span(values(row, "time_to_target")))
    if len(ranked) == 1:
        return text + "; no other family reached it in every run."
    runner = fastest[ranked[1][1], workers]
    held = order(values(row, "time_to_target"), values(runner, "time_to_target")) == "<"
    return text + "; the next, %s (%s, %s), %s." % (
        ranked[1][1], plan.label(runner), span(values(runner, "time_to_target")),
        "was slower in every repeat" if held else "is within noise of it")


def jin_verdict(fastest, counts, settings):
    """Where this machine agrees with Jin et al. at small scale, and why it may not."""
    small = [w for w in counts if w >= 2]
    if not small:
        return None
    workers = small[0]
    asynchronous = [fastest[f, workers] for f in ("elastic averaging", "gossip")
                    if (f, workers) in fastest and fastest[f, workers]]
    synchronous = fastest.get(("synchronous all-reduce", workers))
    cores = settings["machine"]["cores"]
    why = "" if settings.get("emulate") else (
        " On this machine %d core(s) run every task: beyond %d worker(s) (and a ps) the tasks "
        "share cores, so adding workers adds communication and no compute, and each run's "
        "first seconds are TensorFlow's start-up, the same for every family." % (
            cores, max(cores - 1, 1)))
    if not asynchronous or not synchronous:
        return ("At %d workers elastic averaging or gossip, and synchronous all-reduce, did not "
                "both reach the target in every run, so Jin et al.'s small-scale claim was not "
                "tested." % workers) + why
    best_async = min(asynchronous, key=lambda row: row["time_to_target"])
    outcome = lower(values(best_async, "time_to_target"), values(synchronous, "time_to_target"))
    return ("At %d workers the faster of elastic averaging and gossip, %s, took %s against %s "
            "for synchronous all-reduce (%s): this %s." % (
                workers, plan.label(best_async), span(values(best_async, "time_to_target")),
                span(values(synchronous, "time_to_target")), plan.label(synchronous),
                bears_on(outcome, JIN))) + why


# ---------------------------------------------------------------------------------------------
# The emulated comparison (--emulate): the same sentences per scenario, and each seed paper's
# claim where a scenario can test it.
# ---------------------------------------------------------------------------------------------
JIN_SCALING = ("Jin et al. 2016's finding that synchronous all-reduce SGD scales further than "
               "the asynchronous methods")
CHEN_EMULATED = ("Chen et al. 2016 (\"Revisiting Distributed Synchronous SGD\"), where "
                 "synchronous SGD with backup workers beats both plain synchronous and "
                 "asynchronous SGD under stragglers")
DEAN = ("Dean et al. 2012 (\"Large Scale Distributed Deep Networks\"), where DOWNPOUR's window "
        "of local steps between exchanges tolerates slow links")
ELASTIC_OR_GOSSIP = ("elastic averaging", "gossip")
COMPUTE_TOLERANCE = 0.15  # a run whose measured compute time is further off was CPU-bound


def emulated_findings(rows, settings, runs):
    """The list of findings of an emulated comparison, in Markdown."""
    if not any(row["runs_ok"] for row in rows):
        return ("No run of the comparison finished successfully, so there is nothing to "
                "conclude yet (see the failed runs below, or run it).")
    lines = bullets(caveats(rows, settings, runs) + emulation_caveats(runs))
    section = settings["sections"][0]
    for scenario in plan.scenarios(rows):
        table = [row for row in rows if row.get("scenario") == scenario
                 and row["section"] == section and row["runs_ok"]]
        if not table:
            continue
        distributed = [row for row in table if row["family"] != "baseline"]
        lines.append("- On the emulated %s cluster (%s), at %s:" % (
            scenario, settings["emulate"]["details"][scenario]["title"], section))
        fastest, counts, _ = jin_fastest(table, section)
        lines += bullets([first_to_target(table, settings["target"]),
                          against_baseline(table, float("inf")), family_accuracy(distributed),
                          jin_verdict(fastest, counts, settings),
                          jin_scaling(distributed, settings["repeats"]),
                          chen_backup(distributed)], indent="  ")
    lines += bullets([dean_window(rows, settings, section)])
    return "\n".join(lines)


def emulation_caveats(runs):
    """Where the emulation itself was off: runs whose workers' compute time per step came out
    above the configured (the CPUs were the bottleneck), links that delivered less than
    configured, and TensorFlow's own cost per step, which is not scaled."""
    emulated = [run for run in runs if run["ok"] and run.get("measured")]
    if not emulated:
        return []
    notes = []
    slow = [run for run in emulated if any(
        worker.get("compute_measured_seconds", 0) > (1 + COMPUTE_TOLERANCE)
        * worker["compute_seconds"] for worker in run["measured"]["workers"].values())]
    if slow:
        notes.append("In %d of %d emulated runs a worker's measured compute time per step was "
                     "more than %d%% above its configured one (it waited for a CPU: this "
                     "machine's CPUs, not the emulated cluster, set part of those runs' pace), "
                     "most at %s." % (len(slow), len(emulated), 100 * COMPUTE_TOLERANCE,
                                      ", ".join(sorted({"%d workers" % run["workers"]
                                                        for run in slow}))))
    checks = [100 * run["link_measured_bits_per_second"] / run["link_bits_per_second"]
              for run in emulated if run.get("link_measured_bits_per_second")]
    if checks:
        notes.append("The links delivered %.0f %% of their configured rate on average (%.0f–%.0f "
                     "%% over %d runs) to a bulk TCP transfer before each run (TCP's goodput: "
                     "the headers take the rest)." % (mean(checks), min(checks), max(checks),
                                                       len(checks)))
    own = [100 * worker["cpu_seconds_per_step"] / worker["compute_seconds"]
           for run in emulated for worker in run["measured"]["workers"].values()
           if "cpu_seconds_per_step" in worker and worker["compute_seconds"]]
    if own:
        notes.append("Each step also cost TensorFlow's own CPU time on this machine (the "
                     "example's model, its session.run, serializing θ and g), %.0f %% of the "
                     "emulated compute time on average (%.0f–%.0f %% over the %d workers of the "
                     "runs): it is not scaled, so every emulated step is longer than the real "
                     "one it stands for." % (mean(own), min(own), max(own), len(own)))
    notes.append("Every repeat uses the same seed: repeats differ in timing, not in the data's "
                 "order or θ's initial values, so a difference that held in every repeat can "
                 "still be one of this seed.")
    return notes


def measure_of(rows):
    """The time to target if every run of every row reached it, else the time to finish the
    budget, which every run has: (measure, its words)."""
    if all(complete(row, "time_to_target") for row in rows):
        return "time_to_target", MEASURE_WORDS["time_to_target"]
    return "wall_seconds", MEASURE_WORDS["wall_seconds"]


def jin_scaling(distributed, repeats):
    """Jin et al.: from the fewest to the most workers, how much faster to the target
    synchronous all-reduce got, against the best of elastic averaging and gossip."""
    def in_family(families, workers):
        return [row for row in distributed if jin_family(row) in families
                and row["workers"] == workers and complete(row, "time_to_target")
                and not (row["aggregated"] and row["aggregated"] < row["workers"])]
    counts = sorted(w for w in {row["workers"] for row in distributed}
                    if in_family(["synchronous all-reduce"], w) and in_family(ELASTIC_OR_GOSSIP, w))
    if len(counts) < 2:
        return ("Synchronous all-reduce and elastic averaging or gossip did not both reach the "
                "target in every run at two worker counts, so %s was not tested." % JIN_SCALING)
    low, high = counts[0], counts[-1]
    gains = {}
    for name, families in (("all-reduce", ["synchronous all-reduce"]),
                           ("elastic/gossip", ELASTIC_OR_GOSSIP)):
        best = min(in_family(families, high), key=lambda row: row["time_to_target"])
        before = next((row for row in in_family(families, low)
                       if row["algorithm"] == best["algorithm"]), None)
        if before is None:
            return None
        gains[name] = (best, ratios(before["per_repeat"]["time_to_target"],
                                    best["per_repeat"]["time_to_target"]))
    (sync, mine), (async_, theirs) = gains["all-reduce"], gains["elastic/gossip"]
    if not mine or not theirs:
        return None
    return ("From %d to %d workers %s's time to the target was divided by %s, that of %s (the "
            "faster of elastic averaging and gossip at %d) by %s (below 1: it grew): this %s." % (
                low, high, plan.label(sync), span(mine, "%.2f", ""), plan.label(async_), high,
                span(theirs, "%.2f", ""), bears_on(lower(theirs, mine), JIN_SCALING)))


def chen_backup(distributed):
    """Chen et al.: where the scenario has stragglers, BACKUP_ALGORITHM with backup workers
    against itself aggregating every worker and against the fastest asynchronous algorithm."""
    sentences = []
    for backup in (row for row in distributed if row["algorithm"] == plan.BACKUP_ALGORITHM
                   and row["aggregated"] and row["aggregated"] < row["workers"]):
        full = next((row for row in distributed if row["algorithm"] == plan.BACKUP_ALGORITHM
                     and row["workers"] == backup["workers"]
                     and row["aggregated"] == row["workers"]), None)
        asynchronous = [row for row in distributed if row["family"] == "asynchronous"
                        and row["workers"] == backup["workers"]]
        if not full or not asynchronous:
            continue
        measure, words = measure_of([backup, full] + asynchronous)
        fastest = min((row for row in asynchronous if values(row, measure)),
                      key=lambda row: row[measure], default=None)
        mine, sync, async_ = (values(row, measure) if row else []
                              for row in (backup, full, fastest))
        if not mine or not sync or not async_:
            continue
        over_sync, over_async = lower(mine, sync), lower(mine, async_)
        outcome = (True if over_sync and over_async else
                   False if False in (over_sync, over_async) else None)
        sentences.append(
            "With %d workers and %d straggler(s), %s's %s was %s against %s aggregating all %d "
            "and %s for the fastest asynchronous algorithm, %s: this %s." % (
                backup["workers"], backup["workers"] - backup["aggregated"], plan.label(backup),
                words, span(mine), span(sync), backup["workers"], span(async_),
                plan.label(fastest), bears_on(outcome, CHEN_EMULATED)))
    return " ".join(sentences) or None


def dean_window(rows, settings, section):
    """Dean et al.: how much longer DOWNPOUR (a window of local steps per exchange) took on the
    slowest links than on the fastest, against Hogwild (an exchange every step), at the most
    workers both ran on both; repeat by repeat."""
    details = settings["emulate"]["details"]
    homogeneous = [name for name in plan.scenarios(rows)
                   if details[name]["compute"]["kind"] == "homogeneous"]
    if len(homogeneous) < 2:
        return ("Only one scenario with even workers ran, so %s was not tested (run "
                "datacenter and commodity together)." % DEAN)
    fast, slow = (f(homogeneous, key=lambda name: details[name]["link_bits_per_second"])
                  for f in (max, min))

    def find(algorithm, scenario, workers):
        return next((row for row in rows if row["algorithm"] == algorithm
                     and row.get("scenario") == scenario and row["workers"] == workers
                     and row["section"] == section and row["runs_ok"]), None)
    counts = sorted(w for w in {row["workers"] for row in rows}
                    if all(find(a, s, w) for a in ("DOWNPOUR", "Hogwild") for s in (fast, slow)))
    if not counts:
        return "DOWNPOUR and Hogwild did not both run on %s and %s, so %s was not tested." % (
            fast, slow, DEAN)
    workers = counts[-1]
    pairs = {a: (find(a, fast, workers), find(a, slow, workers)) for a in ("DOWNPOUR", "Hogwild")}
    measure, words = measure_of([row for pair in pairs.values() for row in pair])
    slowdown = {a: ratios(pair[1]["per_repeat"][measure], pair[0]["per_repeat"][measure])
                for a, pair in pairs.items()}
    if not slowdown["DOWNPOUR"] or not slowdown["Hogwild"]:
        return None
    return ("With %d workers, going from the %s links (%s) to the %s ones (%s) multiplied "
            "DOWNPOUR's %s (window %s) by %s and Hogwild's (an exchange every step) by %s: "
            "this %s." % (
                workers, fast, rate_words(details[fast]), slow, rate_words(details[slow]), words,
                window_of(pairs["DOWNPOUR"][0]), span(slowdown["DOWNPOUR"], "%.2f", "", "×"),
                span(slowdown["Hogwild"], "%.2f", "", "×"),
                bears_on(lower(slowdown["DOWNPOUR"], slowdown["Hogwild"]), DEAN)))


def rate_words(detail):
    return "%g Gb/s" % (detail["link_bits_per_second"] / 1e9)


def window_of(row):
    """The --window a configuration runs with ('its default' where the plan gives none)."""
    args = row["args"]
    return args[args.index("--window") + 1] if "--window" in args else "at its default"
