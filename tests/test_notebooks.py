"""The Basics-Tutorial notebooks run top to bottom in a fresh python3 kernel of this interpreter,
print what they teach, leave no server behind, and are saved with the outputs of such a run.

They run through Basics-Tutorial/execute.py (the script that saved their outputs), on in-memory
copies: the files are never rewritten here. Each notebook also asserts what it teaches in its
own cells, so a notebook whose cells fail fails its test with the cell's traceback.
"""
import json
import os
import re
import socket
import sys

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

from helpers import ROOT, free_ports, load_example

execute = load_example("Basics-Tutorial/execute.py")
TUTORIAL = os.path.join(ROOT, "Basics-Tutorial")
NOTEBOOKS = execute.ALONE + execute.SIDE_BY_SIDE
CELL_TIMEOUT = 120  # seconds; far more than any cell needs, so that a hang fails instead
WAIT_SECONDS = 60  # timeout_seconds of the side-by-side notebooks: how long one waits for another


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
    notebooks = execute.execute(execute.ALONE, cell_timeout=CELL_TIMEOUT)
    return {path: text_of(notebook) for path, notebook in zip(execute.ALONE, notebooks)}


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
    ps, worker1, worker2 = [text_of(notebook) for notebook in execute.execute(
        execute.SIDE_BY_SIDE, env=dict(os.environ, TUTORIAL_CLUSTER=cluster_file),
        cell_timeout=CELL_TIMEOUT)]
    assert "worker1 pushed the global w is now [3.0, 0.0]" in ps
    assert "worker2 pushed the global w is now [0.75, 6.0]" in ps
    assert "worker1 done" in ps and "worker2 done" in ps
    assert "the global w on the ps: [0.75, 6.0]" in ps
    assert "pushed Δ = [3.0, 0.0]; the global w is now [3.0, 0.0]" in worker1
    assert "worker 1's local w: [3.0, 0.0], the global w: [0.75, 6.0]" in worker1
    assert "the local steps ran on ['/job:worker/replica:0/task:0/device:CPU:0']" in worker1
    assert "pulled w = [3.0, 0.0] - worker 1's progress" in worker2
    assert "pushed Δ = [-2.25, 6.0]; the global w is now [0.75, 6.0]" in worker2
    assert "the local steps ran on ['/job:worker/replica:0/task:1/device:CPU:0']" in worker2
    for text in (ps, worker1, worker2):
        assert ports_in(text) == set(ports), "every notebook read the cluster file of the test"
    assert_nothing_listens_on(ports)


def test_a_worker_without_its_ps_fails_in_bounded_time_instead_of_waiting_forever(tmp_path):
    ports = free_ports(3)
    cluster_file = write_cluster_file(tmp_path, ports, timeout_seconds=2)
    with pytest.raises(CellExecutionError) as failure:
        execute.execute(["Multiple-Workers/Local-then-Global-Variables-Worker1.ipynb"],
                        env=dict(os.environ, TUTORIAL_CLUSTER=cluster_file),
                        cell_timeout=CELL_TIMEOUT)
    assert "DeadlineExceededError" in str(failure.value)
    assert "ps_session.run" in str(failure.value), "it is the wait for the ps that gave up"
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


def test_the_side_by_side_notebooks_share_one_setup_cell():
    setups = []
    for path in execute.SIDE_BY_SIDE:
        notebook = nbformat.read(os.path.join(TUTORIAL, path), as_version=4)
        setups.append([cell.source for cell in notebook.cells if cell.cell_type == "code"][0])
    assert setups[0] == setups[1] == setups[2]
    assert 'os.environ.get("TUTORIAL_CLUSTER", "cluster.json")' in setups[0]


def test_the_readme_lists_every_notebook_in_reading_order():
    readme = open(os.path.join(TUTORIAL, "README.md")).read()
    positions = [readme.index("](%s)" % path) for path in NOTEBOOKS]
    assert positions == sorted(positions)
