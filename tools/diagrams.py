"""Draw the repository's diagrams with matplotlib, so that they stay true to the code they show.

    python tools/diagrams.py              write every diagram where the READMEs show it
    python tools/diagrams.py --out DIR    write them into DIR instead (the tests regenerate them)

Each diagram is a function in DIAGRAMS that draws one figure; its PNG is written without a date
in it, so the same matplotlib draws the same bytes, and a diagram that did not change leaves a
clean `git status`. The PNG records the matplotlib that drew it (its "Software" text chunk).
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no window
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOFTWARE = "tools/diagrams.py, matplotlib %s" % matplotlib.__version__
DPI = 100
PS_COLOUR, WORKER_COLOUR, THETA_COLOUR, GRADIENT_COLOUR = "#fde9c9", "#dbe9f6", "#1f5fa8", "#b8421b"


def box(axes, x, y, width, height, title, body, colour):
    """A task: a rounded box centred at (x, y), its name in bold and what it holds below."""
    axes.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height,
                                  boxstyle="round,pad=0.02,rounding_size=0.04",
                                  facecolor=colour, edgecolor="#444444", linewidth=1.2))
    axes.text(x, y + height / 2 - 0.07, title, ha="center", va="top", fontsize=11,
              fontweight="bold")
    axes.text(x, y - 0.04, body, ha="center", va="center", fontsize=9.5, linespacing=1.4)


def arrow(axes, start, end, label, colour, label_side, dashed=False):
    """A message from one task to another, labelled beside its middle."""
    axes.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14,
                                   color=colour, linewidth=1.6,
                                   linestyle=(0, (4, 3)) if dashed else "solid"))
    middle_x, middle_y = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
    axes.text(middle_x + 0.035 * label_side, middle_y, label, color=colour, fontsize=10,
              ha="left" if label_side > 0 else "right", va="center")


def cluster_panel(axes, title, ps_body, rule, note, synchronous, worker_body=None,
                  down="θ", up="gᵢ", ps_title="ps0"):
    """One ps above two workers; `down` (θ) goes to each worker, `up` (its gradient g, or
    whatever the family sends) comes back; a synchronous ps also hands out tokens."""
    axes.set_xlim(0, 1)
    axes.set_ylim(-0.1, 1.02)
    axes.axis("off")
    axes.set_title(title, fontsize=12, loc="left")
    ps_y, ps_height = 0.74, 0.3
    # A worker box grows upwards with its text (two lines fit the smallest one).
    worker_height = max(0.28, 0.1 + 0.065 * (worker_body or "\n").count("\n") + 0.065)
    worker_y = 0.14 + (worker_height - 0.28) / 2
    box(axes, 0.5, ps_y, 0.5, ps_height, ps_title, ps_body, PS_COLOUR)
    for task, x in enumerate((0.22, 0.78)):
        index = "₀₁"[task]
        box(axes, x, worker_y, 0.38, worker_height,
            "worker%d%s" % (task, " (chief)" if task == 0 else ""),
            (worker_body or "its own shard of the data\ngᵢ = ∇loss(θ; its minibatch)").replace(
                "ᵢ", index), WORKER_COLOUR)
        top, bottom = worker_y + worker_height / 2 + 0.02, ps_y - ps_height / 2 - 0.02
        ps_x = 0.5 + (x - 0.5) * 0.55
        outer, inner = (-1, 1) if task == 0 else (1, -1)
        arrow(axes, (ps_x + 0.045 * outer, bottom), (x + 0.045 * outer, top),
              down.replace("ᵢ", index), THETA_COLOUR, outer)
        arrow(axes, (x + 0.045 * inner, top), (ps_x + 0.045 * inner, bottom),
              up.replace("ᵢ", index), GRADIENT_COLOUR, inner)
        if synchronous:
            arrow(axes, (ps_x + 0.14 * outer, bottom), (x + 0.14 * outer, top), "token",
                  "#555555", outer, dashed=True)
    axes.text(0.5, ps_y + ps_height / 2 + 0.05, rule, ha="center", va="bottom", fontsize=11)
    axes.text(0.5, -0.09, note, ha="center", va="bottom", fontsize=9.5, style="italic",
              color="#333333")


def peers_panel(axes, title, worker_body, exchange, rule, note):
    """Workers only, no ps: each holds its own replica, and they exchange with each other."""
    axes.set_xlim(0, 1)
    axes.set_ylim(-0.1, 1.02)
    axes.axis("off")
    axes.set_title(title, fontsize=12, loc="left")
    worker_y, worker_height = 0.42, 0.42
    for task, x in enumerate((0.22, 0.78)):
        box(axes, x, worker_y, 0.38, worker_height,
            "worker%d%s" % (task, " (leader)" if task == 0 else ""),
            worker_body.replace("ᵢ", "₀₁"[task]), WORKER_COLOUR)
    middle = worker_y - 0.02
    arrow(axes, (0.42, middle + 0.06), (0.58, middle + 0.06), "", GRADIENT_COLOUR, 1)
    arrow(axes, (0.58, middle - 0.06), (0.42, middle - 0.06), "", GRADIENT_COLOUR, 1)
    axes.text(0.5, middle, exchange, color=GRADIENT_COLOUR, fontsize=9.5, ha="center",
              va="center", linespacing=1.3)
    axes.text(0.5, worker_y + worker_height / 2 + 0.12, rule, ha="center", va="bottom",
              fontsize=11)
    axes.text(0.5, -0.09, note, ha="center", va="bottom", fontsize=9.5, style="italic",
              color="#333333")


def one_panel(draw_panel, **panel):
    """A figure of one family's data flow."""
    figure, axes = plt.subplots(figsize=(6.2, 4.9))
    draw_panel(axes, **panel)
    figure.subplots_adjust(left=0.02, right=0.98, top=0.9, bottom=0.03)
    return figure


def ps_and_workers():
    """The data flow of the two families: θ on the ps, g from each worker; asynchronous
    (every g applied as it comes) and synchronous (SyncReplicasOptimizer: the mean of one g
    from each worker, then tokens release the workers)."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.9))
    cluster_panel(left, "asynchronous: Distributed-Setup, Hogwild, ...",
                  "θ: the model's parameters\nglobal_step",
                  "θ ← θ − η·g, for each g as it comes",
                  "no worker waits for the other; a g may come from a θ that has moved since",
                  synchronous=False)
    cluster_panel(right, "synchronous: Synchronous-SGD (SyncReplicasOptimizer)",
                  "θ, global_step\none accumulator per variable\na queue of tokens",
                  "θ ← θ − η·(g₀ + g₁)/2, once both have come",
                  "each worker waits for its token: one per worker after each update",
                  synchronous=True)
    figure.subplots_adjust(left=0.02, right=0.98, top=0.9, bottom=0.03, wspace=0.08)
    return figure


def asynchronous():
    return one_panel(
        cluster_panel, title="asynchronous: Distributed-Setup, Hogwild, Multiple-GPUs",
        ps_body="θ: the model's parameters\nglobal_step", rule="θ ← θ − η·gᵢ, for each gᵢ as it comes",
        note="every step: read θ, send g; nobody waits (Hogwild: and nothing is locked)",
        synchronous=False)


def windowed():
    return one_panel(
        cluster_panel, title="windowed: DOWNPOUR, DOWNPOUR-Easy, AGN",
        ps_body="θ, global_step\n(DOWNPOUR: Adagrad's slots)", rule="θ ← θ + Δᵢ, for each Δᵢ as it comes",
        worker_body="θᵢ ← θ (pull), then T local\nsteps on θᵢ (local variables)\n"
                    "Δᵢ: the window's update\n(AGN: divided by T)",
        down="θ, every T steps", up="Δᵢ", synchronous=False,
        note="one exchange per T local steps; a Δ may come from a θ that has moved since")


def elastic():
    return one_panel(
        cluster_panel, title="elastic averaging: AEASGD, EAMSGD",
        ps_body="x̃: the centre variable\nglobal_step", rule="x̃ ← x̃ + Eᵢ, for each Eᵢ as it comes",
        worker_body="θᵢ: its own model (local)\nT local steps (EAMSGD: momentum)\n"
                    "Eᵢ = α·(θᵢ − x̃);  θᵢ ← θᵢ − Eᵢ",
        down="x̃, every T steps", up="Eᵢ", synchronous=False,
        note="the elastic force pulls each θᵢ and x̃ towards each other")


def staleness():
    return one_panel(
        cluster_panel, title="staleness-aware: DynSGD, Staleness-Aware-SGD",
        ps_body="θ, global_step\nthe update counter", rule="θ ← θ − η·gᵢ / (τ + 1)    (Staleness-Aware: η/τ)",
        worker_body="reads θ and the counter c\ngᵢ = ∇loss(θ; its minibatch)",
        down="θ, c", up="gᵢ, c", synchronous=False,
        note="τ = counter now − c: an update computed on an old θ counts for less")


def synchronous():
    return one_panel(
        cluster_panel, title="synchronous: Synchronous-SGD (and a rate per worker)",
        ps_body="θ, global_step\none accumulator per variable\na queue of tokens",
        rule="θ ← θ − η·mean(gᵢ), once N have come", synchronous=True,
        note="each worker waits for its token; with N < M the first N fresh g count")


def synchronous_rounds():
    return one_panel(
        cluster_panel, title="synchronous rounds: SAGN, Local-SGD",
        ps_body="θ, global_step\none accumulator per variable\na queue of tokens",
        rule="θ ← θ + mean(Δᵢ), once N have come",
        worker_body="from θ, T local steps on θᵢ\nΔᵢ = θᵢ − θ\n"
                    "(SAGN: /T; Local-SGD: weighted\nby the shard's size)",
        down="θ", up="Δᵢ", synchronous=True,
        note="one exchange per round of T local steps; every worker starts from the same θ")


def all_reduce():
    return one_panel(
        peers_panel, title="all-reduce: AllReduce-SGD (no ps)",
        worker_body="θᵢ: a full replica (local)\ngᵢ = ∇loss(θᵢ; its minibatch)\n"
                    "θᵢ ← θᵢ − η·mean(g)",
        exchange="all-reduce\nmean(g)", rule="every worker applies the same mean of g",
        note="collective ops between the workers; the replicas stay identical")


def decentralized():
    """Workers only, no ps: four replicas and one round of gossip, each worker taking the θ of
    the peer it drew (a worker may be drawn by several, or by none)."""
    figure, axes = plt.subplots(figsize=(6.2, 4.9))
    axes.set_xlim(0, 1)
    axes.set_ylim(-0.1, 1.02)
    axes.axis("off")
    axes.set_title("decentralized: Gossip-SGD, AD-PSGD (no ps)", fontsize=12, loc="left")
    corners = [(0.2, 0.66), (0.8, 0.66), (0.2, 0.17), (0.8, 0.17)]
    for task, (x, y) in enumerate(corners):
        index = "₀₁₂₃"[task]
        box(axes, x, y, 0.34, 0.25, "worker%d" % task,
            "θ%s: its own replica\nlocal steps on its shard" % index, WORKER_COLOUR)
    # One round: worker0 and worker1 drew each other, worker2 drew worker0, worker3 worker2.
    for start, end, label in [((0.37, 0.70), (0.63, 0.70), "θ₀"),
                              ((0.63, 0.62), (0.37, 0.62), "θ₁"),
                              ((0.27, 0.53), (0.27, 0.30), "θ₀"),
                              ((0.37, 0.17), (0.63, 0.17), "θ₂")]:
        arrow(axes, start, end, "", GRADIENT_COLOUR, 1)
        vertical = start[0] == end[0]
        axes.text((start[0] + end[0]) / 2 + (0.03 if vertical else 0),
                  (start[1] + end[1]) / 2 + (0 if vertical else 0.02), label,
                  color=GRADIENT_COLOUR, fontsize=10, ha="left" if vertical else "center",
                  va="center" if vertical else "bottom")
    axes.text(0.5, 0.86, "θᵢ ← (θᵢ + θⱼ)/2, with a random peer j", ha="center",
              va="bottom", fontsize=11)
    axes.text(0.5, -0.09, "Gossip-SGD: every T steps, a seeded peer; AD-PSGD: every step,\n"
              "both set to the mean under locks, then θᵢ ← θᵢ − η·gᵢ", ha="center",
              va="bottom", fontsize=9.5, style="italic", color="#333333", linespacing=1.3)
    figure.subplots_adjust(left=0.02, right=0.98, top=0.9, bottom=0.03)
    return figure


# Each diagram: its function, and where it is shown (relative to the repository's root).
DIAGRAMS = {"Basics-Tutorial/ps-and-workers.png": ps_and_workers,
            "diagrams/asynchronous.png": asynchronous,
            "diagrams/windowed.png": windowed,
            "diagrams/elastic.png": elastic,
            "diagrams/staleness.png": staleness,
            "diagrams/synchronous.png": synchronous,
            "diagrams/synchronous-rounds.png": synchronous_rounds,
            "diagrams/all-reduce.png": all_reduce,
            "diagrams/decentralized.png": decentralized}
# The READMEs that show each family's diagram: every example folder's, and the main README.
SHOWN_IN = {
    "diagrams/asynchronous.png": ["Distributed-Setup", "Hogwild", "Multiple-GPUs-Single-Machine",
                                  "Async-SVRG"],
    "diagrams/windowed.png": ["DOWNPOUR", "DOWNPOUR-Easy", "AGN"],
    "diagrams/elastic.png": ["AEASGD", "EAMSGD"],
    "diagrams/staleness.png": ["DynSGD", "Staleness-Aware-SGD"],
    "diagrams/synchronous.png": ["Synchronous-SGD", "Synchronous-SGD-different-learning-rates",
                                 "Sync-Switch"],
    "diagrams/synchronous-rounds.png": ["SAGN", "Local-SGD"],
    "diagrams/all-reduce.png": ["AllReduce-SGD", "Pipe-SGD"],
    "diagrams/decentralized.png": ["Gossip-SGD", "AD-PSGD"]}


def write(out=None):
    """Draws every diagram into out (by its file name), or where the READMEs show it; returns
    the paths written."""
    written = []
    for relative_path, draw in DIAGRAMS.items():
        path = (os.path.join(out, os.path.basename(relative_path)) if out
                else os.path.join(ROOT, relative_path))
        figure = draw()
        figure.savefig(path, dpi=DPI, metadata={"Software": SOFTWARE})
        plt.close(figure)
        written.append(path)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the diagrams into this folder instead")
    args = parser.parse_args(argv)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    for path in write(args.out):
        print("wrote", os.path.relpath(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
