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


def cluster_panel(axes, title, ps_body, rule, note, synchronous):
    """One ps above two workers; θ goes down to each worker, its gradient g comes back up."""
    axes.set_xlim(0, 1)
    axes.set_ylim(-0.1, 1.02)
    axes.axis("off")
    axes.set_title(title, fontsize=12, loc="left")
    ps_y, worker_y, ps_height, worker_height = 0.74, 0.14, 0.3, 0.28
    box(axes, 0.5, ps_y, 0.5, ps_height, "ps0", ps_body, PS_COLOUR)
    for task, x in enumerate((0.22, 0.78)):
        box(axes, x, worker_y, 0.38, worker_height,
            "worker%d%s" % (task, " (chief)" if task == 0 else ""),
            "its own shard of the data\ng%s = ∇loss(θ; its minibatch)" % "₀₁"[task],
            WORKER_COLOUR)
        top, bottom = worker_y + worker_height / 2 + 0.02, ps_y - ps_height / 2 - 0.02
        ps_x = 0.5 + (x - 0.5) * 0.55
        outer, inner = (-1, 1) if task == 0 else (1, -1)
        arrow(axes, (ps_x + 0.045 * outer, bottom), (x + 0.045 * outer, top), "θ",
              THETA_COLOUR, outer)
        arrow(axes, (x + 0.045 * inner, top), (ps_x + 0.045 * inner, bottom),
              "g%s" % "₀₁"[task], GRADIENT_COLOUR, inner)
        if synchronous:
            arrow(axes, (ps_x + 0.14 * outer, bottom), (x + 0.14 * outer, top), "token",
                  "#555555", outer, dashed=True)
    axes.text(0.5, ps_y + ps_height / 2 + 0.05, rule, ha="center", va="bottom", fontsize=11)
    axes.text(0.5, -0.09, note, ha="center", va="bottom", fontsize=9.5, style="italic",
              color="#333333")


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


# Each diagram: its function, and where it is shown (relative to the repository's root).
DIAGRAMS = {"Basics-Tutorial/ps-and-workers.png": ps_and_workers}


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
