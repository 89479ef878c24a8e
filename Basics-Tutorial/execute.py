"""Run the Basics-Tutorial notebooks as Kernel > Restart & Run All would, and save their outputs.

    python Basics-Tutorial/execute.py           run every notebook and write its outputs into it
    python Basics-Tutorial/execute.py --check   run every notebook, write nothing

Each notebook runs in a new `python3` kernel of this interpreter, in the notebook's folder, with a
time limit per cell; the kernel is shut down at the end, which also ends the TensorFlow servers
the notebook started. The three notebooks that run alone pick free ports, so they run at the
same time. So do the three of Multiple-Workers/, as three people side by side would; they take
their ports from Multiple-Workers/cluster.json, or from the file that the TUTORIAL_CLUSTER
environment variable names. The training loop runs alone too, but last, by itself: it trains a
model for a few seconds, best with the machine's cores to itself. tests/test_notebooks.py runs
the same function on in-memory copies.
"""
import argparse
import asyncio
import os

import nbformat
from nbclient import NotebookClient

HERE = os.path.dirname(os.path.abspath(__file__))
# The reading order of README.md: three notebooks that run alone, three that run together (the
# workers named as the scripts name their tasks: worker0 is task 0, the chief), then the training
# loop, alone.
ALONE = ["Servers.ipynb", "Parameter-Server.ipynb", "Local-then-Global-Variables.ipynb"]
SIDE_BY_SIDE = ["Multiple-Workers/Parameter-Server.ipynb",
                "Multiple-Workers/Local-then-Global-Variables-worker0.ipynb",
                "Multiple-Workers/Local-then-Global-Variables-worker1.ipynb"]
TRAINING = ["Training-Loop.ipynb"]
# Seconds a cell may run: more than timeout_seconds in cluster.json (300), so that a notebook that
# waits in vain for another one fails with its own message first.
CELL_TIMEOUT = 360


def execute(paths, env=None, cell_timeout=CELL_TIMEOUT):
    """Runs the notebooks at paths (relative to this folder) at the same time, each in a new
    kernel, and returns the executed copies in order. The kernels are shut down together once
    every notebook has finished, as a person would close them: a notebook that is done (the
    side-by-side ps) does not take its servers away from the others while they still finish.
    When a cell fails, the others still run to their end (or their own timeouts), the kernels
    are shut down, and then the error, nbclient's CellExecutionError, is raised."""
    clients = []
    for path in paths:
        path = os.path.join(HERE, path)
        clients.append(NotebookClient(nbformat.read(path, as_version=4), timeout=cell_timeout,
                                      kernel_name="python3", record_timing=False,
                                      resources={"metadata": {"path": os.path.dirname(path)}}))

    async def run_all():
        try:
            return await asyncio.gather(
                *[client.async_execute(env=dict(os.environ if env is None else env),
                                       cleanup_kc=False) for client in clients],
                return_exceptions=True)
        finally:
            await asyncio.gather(*[shut_down(client) for client in clients])

    notebooks = asyncio.run(run_all())
    for notebook in notebooks:
        if isinstance(notebook, BaseException):
            raise notebook
        for cell in notebook.cells:
            if cell.cell_type == "code":
                cell.outputs = merge_streams(cell.outputs)
    return notebooks


def merge_streams(outputs):
    """The kernel sends printed text in chunks, at times in the middle of a line; one output per
    run of stdout (or stderr) text reads as it was printed."""
    merged = []
    for output in outputs:
        if (output.output_type == "stream" and merged and merged[-1].output_type == "stream"
                and merged[-1].name == output.name):
            merged[-1].text += output.text
        else:
            merged.append(output)
    return merged


async def shut_down(client):
    """Ends the kernel, and with it every server the notebook started; returns once the
    kernel's process is gone."""
    if client.kc is not None:
        client.kc.stop_channels()
    if client.km is not None and client.km.has_kernel:
        await client.km.shutdown_kernel()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="run the notebooks but leave the files as they are")
    args = parser.parse_args(argv)
    for paths in (ALONE, SIDE_BY_SIDE, TRAINING):
        for path, notebook in zip(paths, execute(paths)):
            if not args.check:
                nbformat.write(notebook, os.path.join(HERE, path))
            print("%s %s" % ("ran" if args.check else "ran and saved", path), flush=True)


if __name__ == "__main__":
    main()
