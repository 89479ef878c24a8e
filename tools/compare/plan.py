"""The plan: which configurations run, and each one's --train_steps under its budget.

--train_steps is the global step at which a script stops, but global steps count different
things: in the asynchronous family one global step is one worker minibatch (a window's commit
adds its T minibatches); in Synchronous-SGD (and its different-learning-rates variant) one update
that averages N workers' minibatches; in SAGN one round that averages N workers' T local steps
(in Local-SGD, H local steps).
So the budget B (--budget) is counted in one of two units, and each script gets
--train_steps = B / (units per global step), rounded up:

- equal minibatches: every run applies B minibatch gradients to θ (the same work). A
  synchronous run then makes N× fewer θ updates than an asynchronous one, each the average of
  N gradients.
- equal updates: every run makes B θ updates. An asynchronous global step is one update, as is
  a synchronous step, whatever N; a SAGN round counts T, its T local steps (as an AGN commit
  counts the T steps of its window), and a Local-SGD round H. A synchronous run then applies
  N× more minibatches.

The emulated comparison (--emulate) has a third budget, equal work per worker: every worker
computes B minibatches, so that each spends the same emulated compute time. A synchronous run
then makes B θ updates (a SAGN round counts T of them, and T of each worker's minibatches), an
asynchronous one M·B (each worker's minibatch is one), and every worker of a ring or gossip
makes B steps.

For the asynchronous family (and the one-process baseline, and any run with N = 1) both budgets
give the same --train_steps, hence the same runs: they are run once and shown in both tables.
A script stops at its first global step ≥ --train_steps, so asynchronous and windowed ones may
go over by a few minibatches (up to a window per worker): the Global updates column shows it.
With backup workers (M workers, N < M aggregated) the M − N late gradients of each step are
computed and dropped: they count in examples/s (work done), not in the budget (work used).
Every algorithm runs at its own default learning rate (the one its script was tuned with).
"""
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools")
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)
from emulate.scenarios import SCENARIOS  # noqa: E402  (tools/emulate: the emulated cluster)
BASELINE = "Non-Distributed_Setup"
STRAGGLER_WORKERS = 3  # the straggler section's cluster: 2 normal workers and 1 slow one
BACKUP_ALGORITHM = "Synchronous-SGD"  # shown with and without one backup worker
SAGN_WINDOW = 4
LOCAL_SGD_WINDOW = 10  # H, Local-SGD's local steps per round (its default)
SPREAD_RATES_BASE = 0.1  # Synchronous-SGD-different-learning-rates' default η

# The report's sections, each with the unit its budget is counted in.
EQUAL_MINIBATCHES, EQUAL_UPDATES, STRAGGLER = "equal minibatches", "equal updates", "straggler"
EQUAL_WORK = "equal work per worker"  # the emulated comparison's
BUDGET_OF = {EQUAL_MINIBATCHES: "minibatches", EQUAL_UPDATES: "updates",
             STRAGGLER: "minibatches", EQUAL_WORK: "minibatches per worker"}


# The families that Jin et al. 2016 compare, and the others of the collection, each with the
# examples that belong to it: the comparison's section on their question reads these.
JIN_FAMILIES = ["synchronous all-reduce", "synchronous ps", "asynchronous ps",
                "elastic averaging", "gossip", "asynchronous decentralized", "model averaging"]
COMPARED_BY_JIN = {"synchronous all-reduce", "asynchronous ps", "elastic averaging", "gossip"}


class Algorithm:
    """One example script, and what one of its global steps consumes and makes when N workers'
    contributions are aggregated: `minibatches(N)` gradients and `updates` θ updates.
    backup_workers: whether a synchronous script takes --replicas_to_aggregate N. replicas:
    every worker makes --train_steps steps on a replica of its own (no ps), so that a global
    step is one minibatch of each of the M workers, whatever the family. min_workers: the
    fewest workers it runs with. jin: its family among JIN_FAMILIES."""

    def __init__(self, name, script, family, minibatches=lambda aggregated: 1, updates=1,
                 extra_args=lambda workers: [], backup_workers=True, replicas=False,
                 min_workers=1, jin=None):
        self.name, self.script, self.family = name, script, family
        self.minibatches, self.updates, self.extra_args = minibatches, updates, extra_args
        self.backup_workers, self.replicas = backup_workers, replicas
        self.min_workers, self.jin = min_workers, jin

    @property
    def synchronous(self):
        return self.family == "synchronous"

    def exists(self):
        return os.path.isfile(os.path.join(ROOT, self.script))


def spread_learning_rates(workers):
    """Worker i's rate, evenly from 0.5·η to 1.5·η (their mean is η); one worker: η."""
    if workers == 1:
        return []
    rates = [SPREAD_RATES_BASE * (0.5 + index / (workers - 1)) for index in range(workers)]
    return ["--learning_rates", ",".join("%g" % round(rate, 6) for rate in rates)]


ALGORITHMS = [
    Algorithm(BASELINE, "Non-Distributed_Setup.py", "baseline"),
    Algorithm("Distributed-Setup", "Distributed-Setup/dist_setup.py", "asynchronous",
              jin="asynchronous ps"),
    Algorithm("Synchronous-SGD", "Synchronous-SGD/ssgd.py", "synchronous",
              minibatches=lambda aggregated: aggregated, jin="synchronous ps"),
    Algorithm("Synchronous-SGD-different-learning-rates",
              "Synchronous-SGD-different-learning-rates/ssgd.py", "synchronous",
              minibatches=lambda aggregated: aggregated, extra_args=spread_learning_rates,
              jin="synchronous ps"),
    Algorithm("SAGN", "SAGN/SAGN.py", "synchronous",
              minibatches=lambda aggregated: aggregated * SAGN_WINDOW, updates=SAGN_WINDOW,
              extra_args=lambda workers: ["--window", str(SAGN_WINDOW)], jin="model averaging"),
    # A round averages N workers' θₖ after H local steps each, like a SAGN round's T.
    Algorithm("Local-SGD", "Local-SGD/Local-SGD.py", "synchronous",
              minibatches=lambda aggregated: aggregated * LOCAL_SGD_WINDOW,
              updates=LOCAL_SGD_WINDOW,
              extra_args=lambda workers: ["--window", str(LOCAL_SGD_WINDOW)],
              jin="model averaging"),
    # Every step averages all M workers' gradients with an all-reduce: no ps, no backup workers.
    Algorithm("AllReduce-SGD", "AllReduce-SGD/AllReduce-SGD.py", "synchronous",
              minibatches=lambda aggregated: aggregated, backup_workers=False, replicas=True,
              jin="synchronous all-reduce"),
    # AllReduce-SGD pipelined: each update applies the mean gradient of the step before.
    Algorithm("Pipe-SGD", "Pipe-SGD/Pipe-SGD.py", "synchronous",
              minibatches=lambda aggregated: aggregated, backup_workers=False, replicas=True,
              jin="synchronous all-reduce"),
    # Every worker makes --train_steps local steps (a minibatch each), averaging with a peer
    # every T: a global step is M minibatches, as in AllReduce-SGD; no backup workers.
    Algorithm("Gossip-SGD", "Gossip-SGD/Gossip-SGD.py", "synchronous",
              minibatches=lambda aggregated: aggregated, backup_workers=False, replicas=True,
              min_workers=2, jin="gossip"),
    # Asynchronous, but each worker steps its own replica --train_steps times, as in Gossip.
    Algorithm("AD-PSGD", "AD-PSGD/AD-PSGD.py", "asynchronous",
              minibatches=lambda workers: workers, replicas=True, min_workers=2,
              jin="asynchronous decentralized"),
    Algorithm("Hogwild", "Hogwild/Hogwild.py", "asynchronous", jin="asynchronous ps"),
    # Synchronous SGD for the first quarter of the global steps (its --switch_at default, 250
    # of 1000), then Hogwild: a global step is an update of either kind.
    Algorithm("Sync-Switch", "Sync-Switch/Sync-Switch.py", "asynchronous",
              jin="asynchronous ps"),
    # Hogwild with the lock it does without: the contrast that shows what Hogwild is.
    Algorithm("Hogwild-locked", "Hogwild/Hogwild.py", "asynchronous",
              extra_args=lambda workers: ["--use_locking"], jin="asynchronous ps"),
    Algorithm("DOWNPOUR", "DOWNPOUR/DOWNPOUR.py", "asynchronous", jin="asynchronous ps"),
    Algorithm("DOWNPOUR-Easy", "DOWNPOUR-Easy/DOWNPOUR.py", "asynchronous",
              jin="asynchronous ps"),
    Algorithm("AGN", "AGN/AGN.py", "asynchronous", jin="asynchronous ps"),
    Algorithm("AEASGD", "AEASGD/AEASGD.py", "asynchronous", jin="elastic averaging"),
    Algorithm("EAMSGD", "EAMSGD/EAMSGD.py", "asynchronous", jin="elastic averaging"),
    Algorithm("DynSGD", "DynSGD/DynSGD.py", "asynchronous", jin="asynchronous ps"),
    Algorithm("Staleness-Aware-SGD", "Staleness-Aware-SGD/Staleness-Aware-SGD.py",
              "asynchronous", jin="asynchronous ps"),
    # Hogwild's updates, variance-reduced; a global step is one update, as in Hogwild (each
    # epoch's full gradient comes on top: about one pass over the training set per epoch).
    Algorithm("Async-SVRG", "Async-SVRG/Async-SVRG.py", "asynchronous", jin="asynchronous ps"),
]
BY_NAME = {algorithm.name: algorithm for algorithm in ALGORITHMS}
NOT_COMPARED = {"Basics-Tutorial", "Multiple-GPUs-Single-Machine"}  # no new algorithm there


def available_algorithms():
    """The known algorithms whose script is in the checkout (others may be being written)."""
    return [algorithm for algorithm in ALGORITHMS if algorithm.exists()]


def unknown_example_folders():
    """Folders with a run.sh that this tool does not know: not compared (their global step's
    meaning, hence their budget, is unknown here), but named so that nobody misses them."""
    known = {os.path.dirname(a.script) for a in ALGORITHMS} | NOT_COMPARED
    return sorted(name for name in os.listdir(ROOT)
                  if os.path.isfile(os.path.join(ROOT, name, "run.sh")) and name not in known)


def train_steps(budget, unit, minibatches_per_step, updates_per_step, per_worker=1.0):
    """--train_steps that spends `budget` counted in `unit` ("minibatches", "updates", or
    "minibatches per worker": per_worker is what each worker computes in a global step)."""
    per_step = {"minibatches": minibatches_per_step, "updates": updates_per_step,
                "minibatches per worker": per_worker}[unit]
    return int(math.ceil(budget / float(per_step)))


def per_worker(algorithm, workers, aggregated):
    """The minibatches each worker computes in one global step: a synchronous step's
    contribution (one, or a window's T), whether aggregated or dropped as late; one in a
    step of replicas; 1/M of an asynchronous global step, which is one worker's minibatch."""
    if algorithm.replicas:
        return algorithm.minibatches(workers) / float(workers)
    if algorithm.synchronous:
        return algorithm.minibatches(aggregated) / float(aggregated)
    return 1.0 / workers


def make_config(algorithm, workers, settings, unit="minibatches", aggregated=None,
                straggler_delay=0.0, scenario=None):
    """One configuration: the exact script, cluster and flags for a budget in `unit`, on this
    machine's processes or (scenario) on an emulated cluster."""
    aggregated = (aggregated or workers) if algorithm.synchronous else None
    minibatches = algorithm.minibatches(aggregated or (workers if algorithm.replicas else 1))
    steps = train_steps(settings["budget"], unit, minibatches, algorithm.updates,
                        per_worker(algorithm, workers, aggregated))
    args = ["--train_steps", str(steps), "--batch_size", str(settings["batch_size"]),
            "--seed", str(settings["seed"]), "--log_every", str(settings["log_every"])]
    if algorithm.synchronous and algorithm.backup_workers:
        args += ["--replicas_to_aggregate", str(aggregated)]
    args += algorithm.extra_args(workers)
    # The key names what runs: a budget that gives the same --train_steps gives the same runs.
    key = "%s|workers=%d|N=%s|delay=%g|steps=%d" % (algorithm.name, workers, aggregated or "-",
                                                    straggler_delay, steps)
    emulated = {"scenario": scenario} if scenario else {}
    if scenario:
        key += "|scenario=" + scenario
    return dict(emulated, **{"key": key, "algorithm": algorithm.name, "family": algorithm.family,
            "jin_family": algorithm.jin,
            "script": algorithm.script, "workers": workers, "aggregated": aggregated,
            "minibatches_per_global_step": minibatches,
            "updates_per_global_step": algorithm.updates, "train_steps": steps,
            "straggler_delay": straggler_delay,
            "straggler_task": "worker%d" % (workers - 1) if straggler_delay else None,
            "args": args, "sections": []})


def planned(algorithms, settings):
    """(section, configuration) for every row the report will show."""
    if settings.get("emulate"):
        yield from emulated_configs(algorithms, settings)
        return
    distributed = [a for a in algorithms if a.family != "baseline"]
    for section in settings["sections"]:
        unit = BUDGET_OF[section]
        if section == STRAGGLER:
            yield from straggler_configs(distributed, settings)
            continue
        yield section, make_config(BY_NAME[BASELINE], 1, settings, unit)
        for algorithm in distributed:
            for workers in settings["workers"]:
                if workers >= algorithm.min_workers:
                    yield section, make_config(algorithm, workers, settings, unit)


def emulated_configs(algorithms, settings):
    """Every scenario of --emulate: the one-process baseline (the model's compute time, no
    network), and every algorithm (of those the scenario names, if it names some) at every
    worker count; where the scenario has stragglers, BACKUP_ALGORITHM also with as many backup
    workers (it aggregates the others' gradients: Chen et al.'s remedy)."""
    for scenario in settings["emulate"]["scenarios"]:
        stragglers = SCENARIOS[scenario].compute.stragglers
        only = settings["emulate"].get("only", {}).get(scenario)
        for section in settings["sections"]:
            unit = BUDGET_OF[section]
            yield section, make_config(BY_NAME[BASELINE], 1, settings, unit, scenario=scenario)
            for algorithm in (a for a in algorithms if a.family != "baseline"
                              and (not only or a.name in only)):
                for workers in settings["workers"]:
                    if workers < algorithm.min_workers:
                        continue
                    yield section, make_config(algorithm, workers, settings, unit,
                                               scenario=scenario)
                    if algorithm.name == BACKUP_ALGORITHM and 0 < stragglers(workers) < workers:
                        yield section, make_config(
                            algorithm, workers, settings, unit, scenario=scenario,
                            aggregated=workers - stragglers(workers))


def straggler_configs(distributed, settings):
    """Each chosen algorithm with STRAGGLER_WORKERS workers, without and with the slow one;
    BACKUP_ALGORITHM also with one backup worker (N = workers − 1 aggregated)."""
    chosen = settings.get("straggler_algorithms")
    for algorithm in (a for a in distributed if not chosen or a.name in chosen):
        variants = [None, STRAGGLER_WORKERS - 1] if algorithm.name == BACKUP_ALGORITHM else [None]
        for aggregated in variants:
            for delay in (0.0, settings["straggler_delay"]):
                yield STRAGGLER, make_config(algorithm, STRAGGLER_WORKERS, settings,
                                             aggregated=aggregated, straggler_delay=delay)


def build_plan(algorithms, settings):
    """Every configuration once, with the sections it appears in: a run shared by several
    tables (an asynchronous run under both budgets; a 3-worker run without a straggler, both a
    scaling row and the straggler section's reference) runs once per repeat."""
    configs = {}
    for section, config in planned(algorithms, settings):
        config = configs.setdefault(config["key"], config)
        if section not in config["sections"]:
            config["sections"].append(section)
    return list(configs.values())


def scenarios(rows):
    """The scenarios of an emulated comparison's rows or plan, in their order; [None] for a
    comparison on this machine's processes."""
    return list(dict.fromkeys(row.get("scenario") for row in rows)) or [None]


def label(config):
    """A configuration's name in tables and legends (its backup workers, if any)."""
    text = config["algorithm"]
    if config["aggregated"] and config["aggregated"] < config["workers"]:
        text += " (N=%d of %d)" % (config["aggregated"], config["workers"])
    return text


def describe(config):
    """One line of --plan and of the progress: what runs."""
    text = "%s, %d worker%s" % (label(config), config["workers"],
                                "" if config["workers"] == 1 else "s")
    if config["straggler_task"]:
        text += ", %s +%g s/step" % (config["straggler_task"], config["straggler_delay"])
    if config.get("scenario"):
        text += ", emulated %s" % config["scenario"]
    return text
