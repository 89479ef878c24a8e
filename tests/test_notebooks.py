"""The Basics-Tutorial notebooks run top to bottom in a fresh python3 kernel of this interpreter,
print what they teach and nothing on stderr, leave no server behind, and are saved with the
outputs of such a run; their links open from the folder that Jupyter is told to serve.

They run through Basics-Tutorial/execute.py (the script that saved their outputs), on in-memory
copies: the files are never rewritten here. Each notebook also asserts what it teaches in its
own cells, so a notebook whose cells fail fails its test with the cell's traceback.
"""
import json
import os
import re
import socket
import sys
import time

import nbformat
import numpy as np
import pytest
from nbclient.exceptions import CellExecutionError

from helpers import ROOT, free_ports, load_example

execute = load_example("Basics-Tutorial/execute.py")
diagrams = load_example("tools/diagrams.py")
TUTORIAL = os.path.join(ROOT, "Basics-Tutorial")
README = os.path.join(TUTORIAL, "README.md")
NOTEBOOKS = execute.ALONE + execute.SIDE_BY_SIDE + execute.TRAINING
CELL_TIMEOUT = 120  # seconds; far more than any cell needs, so that a hang fails instead
WAIT_SECONDS = 60  # timeout_seconds of the side-by-side notebooks: how long one waits for another
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # IPython colours the tracebacks it prints
# The notebooks that run alone are executed once for the module (the fixture `alone`): under
# pytest-xdist one worker runs all of it.
pytestmark = pytest.mark.xdist_group("notebooks")


def text_of(notebook):
    """Everything the notebook's code cells printed or displayed, in order."""
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                parts.append(output.text)
            elif "data" in output:
                parts.append(output.data.get("text/plain", ""))
    return "".join(parts)


def assert_nothing_on_stderr(path, notebook):
    """No red block under any cell: TensorFlow's start-up lines (absl, oneDNN, CPU features) and
    warnings are silenced before it is imported, on TensorFlow 1.15 as on 2.x."""
    for number, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            assert not (output.output_type == "stream" and output.name == "stderr"), \
                "%s, cell %d wrote to stderr:\n%s" % (path, number, output.text)


def run(paths, **options):
    """execute.execute, asserting that no cell wrote to stderr; returns the printed texts."""
    notebooks = execute.execute(paths, cell_timeout=CELL_TIMEOUT, **options)
    for path, notebook in zip(paths, notebooks):
        assert_nothing_on_stderr(path, notebook)
    return [text_of(notebook) for notebook in notebooks]


def ports_in(text):
    return {int(port) for port in re.findall(r"localhost:(\d+)", text)}


def assert_nothing_listens_on(ports):
    """After a notebook's kernel has ended, each port it used can be bound again."""
    for port in sorted(ports):
        probe = socket.socket()
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("", port))
        except OSError as error:
            raise AssertionError("port %d is still in use: %s" % (port, error))
        finally:
            probe.close()


def write_cluster_file(folder, ports, timeout_seconds):
    path = os.path.join(str(folder), "cluster.json")
    with open(path, "w") as settings:
        json.dump({"cluster": {"ps": ["localhost:%d" % ports[0]],
                               "worker": ["localhost:%d" % port for port in ports[1:]]},
                   "timeout_seconds": timeout_seconds}, settings)
    return path


@pytest.fixture(scope="module")
def alone():
    """The three notebooks that run alone, executed at the same time: {path: printed text}."""
    return dict(zip(execute.ALONE, run(execute.ALONE)))


@pytest.mark.tf2
@pytest.mark.parametrize("path", execute.ALONE)
def test_a_notebook_that_runs_alone_frees_its_ports_when_its_kernel_ends(alone, path):
    text = alone[path]
    ports = ports_in(text)
    assert len(ports) >= 2, "the notebook prints its cluster:\n" + text
    assert_nothing_listens_on(ports)


def test_servers_places_ops_on_other_tasks_and_shows_where_they_ran(alone):
    text = alone["Servers.ipynb"]
    assert "total = 14.0" in text
    assert "squared ran on /job:ps/replica:0/task:0/device:CPU:0" in text
    assert "total   ran on /job:worker/replica:0/task:1/device:CPU:0" in text


def test_parameter_server_places_by_size_shares_a_variable_and_ends_the_ps(alone):
    text = alone["Parameter-Server.ipynb"]
    assert "bytes per ps: [8000000, 4040]" in text  # round-robin
    assert "bytes per ps: [4000040, 4004000]" in text  # the greedy load balancer
    assert "worker 0 added 10; worker 1 reads 10" in text
    assert "worker 1 added 10; worker 0 reads 20" in text
    assert "the ps returned: True - workers in the order they finished: [1, 0]" in text
    assert "the dequeue gave up after 0.5 s: True" in text


def test_local_then_global_keeps_local_state_on_the_worker(alone):
    text = alone["Local-then-Global-Variables.ipynb"]
    assert "pushed:          local [11. 12.]  global [11. 12.]" in text
    assert "LOCAL_VARIABLES:  ['local/w', 'local_optimizer/local/w/Adagrad']" in text
    assert "global variables nobody has initialized: []" in text
    assert "the local steps ran on ['/job:worker/replica:0/task:0/device:CPU:0']" in text


@pytest.mark.tf2
def test_multiple_workers_side_by_side_exchange_updates_through_the_ps(tmp_path):
    ports = free_ports(3)
    cluster_file = write_cluster_file(tmp_path, ports, WAIT_SECONDS)
    ps, worker0, worker1 = run(execute.SIDE_BY_SIDE,
                               env=dict(os.environ, TUTORIAL_CLUSTER=cluster_file))
    assert "worker0 pushed the global w is now [3.0, 0.0]" in ps
    assert "worker1 pushed the global w is now [0.75, 6.0]" in ps
    assert "worker0 done" in ps and "worker1 done" in ps
    assert "the global w on the ps: [0.75, 6.0]" in ps
    assert "worker0 serves at grpc://localhost:%d" % ports[1] in worker0
    assert "pushed Δ = [3.0, 0.0]; the global w is now [3.0, 0.0]" in worker0
    assert "worker0's local w: [3.0, 0.0], the global w: [0.75, 6.0]" in worker0
    assert "the local steps ran on ['/job:worker/replica:0/task:0/device:CPU:0']" in worker0
    assert "worker1 serves at grpc://localhost:%d" % ports[2] in worker1
    assert "pulled w = [3.0, 0.0] - worker0's progress" in worker1
    assert "pushed Δ = [-2.25, 6.0]; the global w is now [0.75, 6.0]" in worker1
    assert "the local steps ran on ['/job:worker/replica:0/task:1/device:CPU:0']" in worker1
    for text in (ps, worker0, worker1):
        assert ports_in(text) == set(ports), "every notebook read the cluster file of the test"
    assert_nothing_listens_on(ports)


def test_a_worker_without_its_ps_says_which_notebook_to_start_in_bounded_time(tmp_path):
    """worker0 started alone: the wait for the ps ends after timeout_seconds (2 s here) with a
    message that names the missing task and the notebook to start first, not with a raw
    DeadlineExceededError, and its cell fails (Run All stops there)."""
    ports = free_ports(3)
    cluster_file = write_cluster_file(tmp_path, ports, timeout_seconds=2)
    started = time.monotonic()
    with pytest.raises(CellExecutionError) as failure:
        execute.execute(["Multiple-Workers/Local-then-Global-Variables-worker0.ipynb"],
                        env=dict(os.environ, TUTORIAL_CLUSTER=cluster_file),
                        cell_timeout=CELL_TIMEOUT)
    seconds = time.monotonic() - started
    message = ANSI_COLOUR.sub("", str(failure.value))
    assert ("TimeoutError: no answer from ps0 at localhost:%d within 2 s (timeout_seconds). Is "
            "Parameter-Server.ipynb running? Start Parameter-Server.ipynb first, then the two "
            "workers" % ports[0]) in message, message
    assert 'wait_for(ps_session, tf.constant(0), "ps0")' in message, "the wait for the ps"
    # Sooner than nbclient's limit for one cell: the notebook's own timeout ended it.
    assert seconds < CELL_TIMEOUT, "it ended %.0f s after it started" % seconds
    assert_nothing_listens_on(ports)


@pytest.mark.tf2
def test_the_training_loop_trains_the_model_across_a_ps_and_two_workers():
    """Asynchronous: every worker step is one global step; synchronous (SyncReplicasOptimizer,
    2 of 2 workers): every global step takes two worker steps (usually one of each worker; under
    load one worker took both tokens of an update: 501 and 499). Both reach the scripts'
    accuracy, and every thread has ended."""
    text, = run(execute.TRAINING)
    match = re.search(r"asynchronous: global step (\d+) = worker0's (\d+) local steps "
                      r"\+ worker1's (\d+)", text)
    assert match, text
    global_step, steps0, steps1 = map(int, match.groups())
    assert global_step == steps0 + steps1 >= 1000 and steps0 > 0 and steps1 > 0, text
    match = re.search(r"synchronous: global step 500; local steps: worker0 (\d+), worker1 (\d+)",
                      text)
    assert match and sum(map(int, match.groups())) == 1000, text
    accuracy = dict(re.findall(r"^(\w+): test accuracy ([\d.]+)", text, re.M))
    assert sorted(accuracy) == ["asynchronous", "synchronous"], text
    assert min(map(float, accuracy.values())) >= 0.93, text  # the scripts' tests ask as much
    assert "threads of ours still running: []" in text, text
    ports = ports_in(text)
    assert len(ports) == 3, text
    assert_nothing_listens_on(ports)


def test_the_kernel_runs_on_the_interpreter_that_runs_the_tests(tmp_path):
    notebook = nbformat.v4.new_notebook()
    notebook.metadata.kernelspec = {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}
    notebook.cells = [nbformat.v4.new_code_cell("import sys\nprint(sys.executable)")]
    path = str(tmp_path / "which.ipynb")
    nbformat.write(notebook, path)
    executed, = execute.execute([path], cell_timeout=CELL_TIMEOUT)
    assert os.path.realpath(text_of(executed).strip()) == os.path.realpath(sys.executable)


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_the_saved_notebook_holds_the_outputs_of_one_run_top_to_bottom(path):
    notebook = nbformat.read(os.path.join(TUTORIAL, path), as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata.kernelspec.name == "python3"
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code_cells] == list(range(1, len(code_cells) + 1))
    outputs = [output for cell in code_cells for output in cell.outputs]
    assert outputs and not [output for output in outputs if output.output_type == "error"]
    assert "stderr" not in [output.get("name") for output in outputs], "no warnings saved"


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_the_first_cell_silences_tensorflow_before_importing_it(path):
    """What keeps stderr empty on TensorFlow 2.x too, where its C++ core and absl log at import:
    checked here as written, since only one of the two routes runs in a test run."""
    notebook = nbformat.read(os.path.join(TUTORIAL, path), as_version=4)
    first = [cell for cell in notebook.cells if cell.cell_type == "code"][0].source
    importing = first.index("import tensorflow")
    assert 'os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"' in first[:importing]
    assert "absl.logging.set_verbosity(absl.logging.ERROR)" in first[:importing]
    assert "tf.logging.set_verbosity(tf.logging.ERROR)" in first[importing:]


def test_the_side_by_side_notebooks_share_one_setup_cell():
    setups = []
    for path in execute.SIDE_BY_SIDE:
        notebook = nbformat.read(os.path.join(TUTORIAL, path), as_version=4)
        setups.append([cell.source for cell in notebook.cells if cell.cell_type == "code"][0])
    assert setups[0] == setups[1] == setups[2]
    assert 'os.environ.get("TUTORIAL_CLUSTER", "cluster.json")' in setups[0]


def test_the_side_by_side_notebooks_name_the_tasks_as_the_scripts_do():
    """ps0, worker0 (task 0, the chief) and worker1 (task 1), as in the scripts' [worker0]
    prefixes and TF_CONFIG's indices: no "worker 1" for task 0, no "worker2"."""
    texts = {"README.md": open(README).read()}
    for path in execute.SIDE_BY_SIDE:
        notebook = nbformat.read(os.path.join(TUTORIAL, path), as_version=4)
        texts[path] = "\n".join([cell.source for cell in notebook.cells] + [text_of(notebook)])
    for path, text in texts.items():
        assert re.findall(r"\b[Ww]orker [0-9]|\bWorker[0-9]|\bworker2\b", text) == [], path
    assert [os.path.basename(path) for path in execute.SIDE_BY_SIDE[1:]] == [
        "Local-then-Global-Variables-worker0.ipynb", "Local-then-Global-Variables-worker1.ipynb"]


def test_the_readme_lists_every_notebook_in_reading_order():
    readme = open(README).read()
    positions = [readme.index("](%s)" % path) for path in NOTEBOOKS]
    assert positions == sorted(positions)


JUPYTER_COMMAND = re.compile(r"jupyter notebook([^\n`#]*)")  # up to a comment
LINK = re.compile(r"\]\(([^)\s]+)\)|(?:src|href)=\"([^\"]+)\"")


def jupyter_roots():
    """The folders that the README's `jupyter notebook` commands serve, which run from the
    repository's root: --notebook-dir, or a folder named on the command line (Jupyter serves
    that folder alone), or the folder it starts in."""
    roots = []
    for arguments in JUPYTER_COMMAND.findall(open(README).read()):
        root = "."
        for argument in arguments.split():
            if argument.startswith("--notebook-dir="):
                root = argument.partition("=")[2]
            elif not argument.startswith("-") and os.path.isdir(os.path.join(ROOT, argument)):
                root = argument
        roots.append(os.path.normpath(os.path.join(ROOT, root)))
    return roots


def relative_links(text):
    links = [link or attribute for link, attribute in LINK.findall(text)]
    return [link.partition("#")[0] for link in links
            if ":" not in link and not link.startswith("#")]


def links_of_the_tutorial():
    """(file, link) for every relative link of every notebook's markdown and of the README."""
    found = [(README, link) for link in relative_links(open(README).read())]
    for path in NOTEBOOKS:
        notebook = nbformat.read(os.path.join(TUTORIAL, path), as_version=4)
        found += [(os.path.join(TUTORIAL, path), link) for cell in notebook.cells
                  if cell.cell_type == "markdown" for link in relative_links(cell.source)]
    return found


def test_every_link_opens_from_the_folder_jupyter_is_told_to_serve():
    """Jupyter serves nothing above the folder it is started in: started as
    `jupyter notebook Basics-Tutorial/`, ../Distributed-Setup/ is a 404. Every relative link
    of the notebooks and of the README names a file or folder that exists, inside every folder
    that the README tells Jupyter to serve."""
    roots = jupyter_roots()
    assert roots, "the README says how to start Jupyter"
    links = links_of_the_tutorial()
    assert len(links) > 40 and any(link.startswith("../") for _, link in links)
    broken = []
    for source, link in links:
        target = os.path.normpath(os.path.join(os.path.dirname(source), link))
        if not os.path.exists(target):
            broken.append("%s: %s does not exist" % (os.path.relpath(source, ROOT), link))
        for root in roots:
            if os.path.commonpath([root, target]) != root:
                broken.append("%s: %s is outside %s, which Jupyter serves"
                              % (os.path.relpath(source, ROOT), link,
                                 os.path.relpath(root, ROOT)))
    assert broken == []


def test_the_readme_shows_the_diagram_and_regenerating_it_draws_the_same_picture(tmp_path):
    """tools/diagrams.py draws the ps/worker diagram that the README shows; drawn again, it
    is the committed picture, pixel for pixel (else: run it and commit the PNG)."""
    from PIL import Image

    committed = {os.path.basename(path): os.path.join(ROOT, path) for path in diagrams.DIAGRAMS}
    assert "](ps-and-workers.png)" in open(README).read()
    written = diagrams.write(str(tmp_path))
    assert sorted(os.path.basename(path) for path in written) == sorted(committed)
    for path in written:
        new, old = Image.open(path), Image.open(committed[os.path.basename(path)])
        assert new.format == "PNG" and new.size == old.size
        assert np.array_equal(np.asarray(new), np.asarray(old)), (
            "%s is not what tools/diagrams.py draws (%s; committed: %s)"
            % (committed[os.path.basename(path)], new.info.get("Software"),
               old.info.get("Software")))


def test_every_example_folder_shows_the_diagram_of_its_family():
    """Each family's data-flow diagram (tools/diagrams.py) is shown by the README of every
    example folder of that family and by the main README; no example folder is left out."""
    scripts = load_example("tools/shared_helpers.py").example_scripts()
    folders = sorted({os.path.basename(os.path.dirname(path)) for path in scripts
                      if os.path.dirname(path) != ROOT})
    assert sorted(f for shown in diagrams.SHOWN_IN.values() for f in shown) == folders
    missing = []
    for picture, shown_in in diagrams.SHOWN_IN.items():
        assert picture in diagrams.DIAGRAMS
        for folder in shown_in:
            if "](../%s)" % picture not in open(os.path.join(ROOT, folder, "README.md")).read():
                missing.append("%s/README.md does not show %s" % (folder, picture))
        if "](%s)" % picture not in open(os.path.join(ROOT, "README.md")).read():
            missing.append("README.md does not show %s" % picture)
    assert missing == []
