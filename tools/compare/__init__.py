"""Synchronous or asynchronous? Run every algorithm on the same budget and measure the answer.

One command trains every algorithm of the collection on the same model, data, seed and batch
size, each as a real local cluster (one ps and the workers on free localhost ports;
tools/launch.py's LocalCluster, always stopped, so that no process outlives its run), under two
budgets: equal minibatches (every run applies the same minibatch gradients to θ) and equal
updates (every run makes the same number of θ updates; synchronous runs then apply N× more
minibatches). It writes into an output folder (default comparison/):

    comparison.md     the tables, each under the budget it uses, the findings, the plots
    comparison.csv    the same rows, plain numbers
    raw.json          the machine, the settings, the plan and every run's RESULT lines
    accuracy_vs_time.png, scaling.png, straggler.png

Run from the repository's root:

    python -m tools.compare --quick               # a few minutes on 2 cores
    python -m tools.compare                       # every algorithm, workers 1,2,4, 3 repeats
    python -m tools.compare --only Hogwild,Synchronous-SGD --workers 1,2,4 --repeats 5
    python -m tools.compare --plan                # what would run, and each --train_steps
    python -m tools.compare --replot comparison   # tables, plots, findings again from raw.json
    python -m tools.compare --only AGN --resume   # add to comparison/: run only what it lacks
    python -m tools.compare --replot results/emulated --readme   # README's emulated column
    python -m tools.compare --emulate datacenter,commodity --workers 1,4,16   # emulated clusters

--emulate runs every configuration on an emulated cluster of a real setting (tools/emulate,
docs/emulation.md: ResNet-50 workers on 10 or 1 Gb/s links, or with stragglers), at equal
work per worker, and judges the seed papers' claims on what it measured.

The modules, one concern each: plan (the algorithms, the budgets, each run's flags), run (the
clusters, raw.json), metrics (each run's numbers, their spread over repeats, when a difference
holds in every repeat), findings (the sentences), report (tables, comparison.md and .csv),
emulated (the emulated comparison's report), plots, cli (flags and settings).
"""
from .cli import main
from .plots import ACCURACY_PLOT, SCALING_PLOT, STRAGGLER_PLOT
from .report import CSV_FILE, MARKDOWN_FILE
from .run import RAW_FILE

__all__ = ["main", "ACCURACY_PLOT", "SCALING_PLOT", "STRAGGLER_PLOT", "CSV_FILE",
           "MARKDOWN_FILE", "RAW_FILE"]
