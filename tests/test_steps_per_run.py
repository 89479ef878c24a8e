"""--steps_per_run K: K training steps in one session.run, in a tf.while_loop, as
Distributed-Setup/dist_setup.py teaches it (no other example has the flag).

The loop must not change the algorithm: K steps in one run leave θ and the global step exactly as
K runs of one step (bit for bit: the same kernels on the same minibatches, in the same order),
with one worker, two that interleave, and three ps tasks; a step is one round trip to the ps;
the TrainingLoop logs at the first run that reaches each --log_every boundary; a real run stops
within K − 1 steps past --train_steps. The graphs are built in this process and run on
tf.train.Servers started here (as the exact-update tests of test_asynchronous.py do).
"""
import os

import numpy as np
import pytest

from helpers import (ROOT, load_example, output, rejected, run_cluster, sent_between_tasks,
                     worker_results)
from test_asynchronous import cluster_flags, in_process_cluster, worker_args

import shared_helpers

DIST_SETUP = "Distributed-Setup/dist_setup.py"
SCRIPTS = [os.path.relpath(path, ROOT) for path in shared_helpers.example_scripts()]


def fetched_by_the_lessons_loop(worker, name="train_op"):
    """What the lesson's loop fetches in each session.run: the global step after it, the losses."""
    built = worker.built
    return [built[name], built["loss"]]


def one_run(worker):
    """What the lesson's loop runs once: (the global step after it, the losses of its steps)."""
    global_step, loss = worker.session.run(fetched_by_the_lessons_loop(worker))
    return np.ravel(global_step)[-1], np.ravel(loss)


def state(worker):
    """Every variable of the worker's graph (θ, the global step, θᵢ, slots, counters)."""
    tf = worker.graph
    with tf.as_default():
        variables = worker.module.tf.global_variables() + worker.module.tf.local_variables()
    return dict(zip([v.op.name for v in variables], worker.session.run(variables)))


def start(script, workers, steps_per_run, extra=(), ps=1):
    module, args, started = in_process_cluster(
        script, workers, ["--steps_per_run", str(steps_per_run)] + list(extra), ps)
    for index, worker in enumerate(started):
        worker.module, worker.steps_per_run = module, steps_per_run
        worker.initialize(chief=index == 0)
    return args, started


def train(steps_per_run, schedule, workers=1, ps=1):
    """Runs Distributed-Setup's workers in the order `schedule` names them (one session.run
    each); returns (every worker's state, its losses, the global steps the runs returned)."""
    _, started = start(DIST_SETUP, workers, steps_per_run, ps=ps)
    losses, steps = [[] for _ in started], []
    for index in schedule:
        global_step, run_losses = one_run(started[index])
        losses[index] += list(run_losses)
        steps.append(global_step)
    return [state(worker) for worker in started], losses, steps


def assert_identical(states, expected_states):
    for got, expected in zip(states, expected_states):
        assert sorted(got) == sorted(expected)
        for name in expected:
            assert np.array_equal(got[name], expected[name]), name


@pytest.mark.tf2
def test_k_steps_in_one_run_are_k_single_steps_bit_for_bit():
    """One worker: K = 10 for 2 runs against K = 1 for 20 runs, from the same seed."""
    looped, looped_losses, looped_steps = train(10, [0, 0])
    single, single_losses, single_steps = train(1, [0] * 20)
    assert_identical(looped, single)
    assert looped_losses == single_losses and len(looped_losses[0]) == 20
    assert looped[0]["global_step"] == 20 and looped_steps == [10, 20]
    assert single_steps[-1] == 20


def test_two_workers_interleaving_runs_of_k_are_their_single_steps_interleaved():
    """Two workers take turns, a run of K = 10 each, against the same turns made of 10 runs of
    one step: θ on the ps and every loss agree exactly."""
    turns = [0, 1, 1, 0, 1, 0]
    looped, looped_losses, _ = train(10, turns, workers=2)
    single, single_losses, _ = train(1, [i for i in turns for _ in range(10)], workers=2)
    assert_identical(looped, single)
    assert looped_losses == single_losses
    assert looped[0]["global_step"] == 60


def test_with_three_ps_tasks_the_steps_are_the_same_and_k_steps_are_still_k_single_steps():
    """θ and the global step spread over three ps tasks (replica_device_setter's round robin):
    each ps task sends its part of θ and takes its part of g in a message of its own. One
    worker, K = 1 twenty times, leaves the state it leaves with one ps task, and K = 10 twice
    leaves it too, bit for bit. Each read of θ is an op of its own that waits for the update
    before (a read held back only by a constant's control edge took the old θ of a ps task
    that held one variable)."""
    looped, looped_losses, looped_steps = train(10, [0, 0], ps=3)
    single, single_losses, _ = train(1, [0] * 20, ps=3)
    one_ps, one_ps_losses, _ = train(1, [0] * 20, ps=1)
    assert_identical(single, one_ps)
    assert single_losses == one_ps_losses
    assert_identical(looped, single)
    assert looped_losses == single_losses and looped_steps == [10, 20]
    module = load_example(DIST_SETUP)
    with module.tf.Graph().as_default():
        module.build_graph(worker_args(module, cluster_flags(1, ps=3), 0))
        devices = {v.device for v in module.tf.global_variables()}
    assert devices == {"/job:ps/task:%d" % i for i in range(3)}, devices


def test_in_the_loop_theta_is_still_updated_on_the_ps_without_a_lock():
    """The K = 100 graph: θ's update inside the while_loop runs on the ps, lock-free."""
    _, [worker] = start(DIST_SETUP, 1, 100)
    operations = worker.graph.get_operations()
    assert any(op.type == "Exit" for op in operations), "a tf.while_loop"
    updates = [op for op in operations if op.type == "ApplyGradientDescent"]
    assert updates and all(not op.get_attr("use_locking") for op in updates)
    assert all(op.device == "/job:ps/task:0" for op in updates)


def crossings_in_the_loop(worker, fetches):
    """{(from task, to task): the tensors sent between the tasks inside the while_loop's frame},
    from the partition graphs TensorFlow ran for one session.run of fetches."""
    sent = sent_between_tasks(worker.module.tf, worker.session, fetches)
    inside = {route: [name for name in names  # each iteration's, not the end's
                      if "while/" in name and "while/Exit" not in name]
              for route, names in sent.items()}
    return {route: names for route, names in inside.items() if names}


def test_in_the_loop_a_step_is_one_round_trip_to_the_ps():
    """K = 10, fetching what the lesson's loop fetches (the global step and the losses). The
    loop variable that carries the global step lives on the ps, so the worker never waits for
    it. Per iteration the worker sends the ps its gradient and the loop's go-on (the predicate
    that drives the ps's part of the loop), and the ps sends θ: nothing else. With that loop
    variable on the worker, the new global step would travel to the worker too, and the
    worker's next iteration would wait for it: a second round trip per step. Were the losses
    written after the update, or the ps's constants started by the worker's go-ahead, each
    would be one more message per iteration. Each task runs its part of the loop one iteration
    at a time, so the ps reads θ only after the update before."""
    _, [worker] = start(DIST_SETUP, 1, 10)
    sent = crossings_in_the_loop(worker, fetched_by_the_lessons_loop(worker))
    to_ps, to_worker = ("/job:worker/task:0", "/job:ps/task:0"), ("/job:ps/task:0",
                                                                 "/job:worker/task:0")
    assert set(sent) == {to_ps, to_worker}, sent
    assert len(sent[to_ps]) == 2 and any("LoopCond" in name for name in sent[to_ps]), sent
    assert len(sent[to_worker]) == 1, sent
    merges = [op for op in worker.graph.get_operations()
              if op.type in ("Merge", "RefMerge") and op.name.startswith("while/")
              and op.outputs[0].dtype.base_dtype == worker.module.tf.int64]
    assert [op.device for op in merges] == ["/job:ps/task:0"], merges
    enters = [op for op in worker.graph.get_operations() if op.type in ("Enter", "RefEnter")]
    assert enters and {op.get_attr("parallel_iterations") for op in enters} == {1}


@pytest.mark.parametrize("script", [script for script in SCRIPTS if script != DIST_SETUP])
def test_every_other_example_has_no_steps_per_run_flag(script, capsys):
    """The loop pays only where a step is as short as the digits MLP's: it is taught in
    Distributed-Setup alone, and the other scripts refuse the flag as any unknown one."""
    error = rejected(load_example(script), ["--steps_per_run", "10"], capsys)
    assert "unrecognized arguments: --steps_per_run 10" in error, error


class FakeSession:
    def run(self, fetches):
        return [0.5, 7] if isinstance(fetches, list) else 0


class FakeWatchdog:
    def progress(self):
        pass


def test_the_training_loop_counts_k_steps_per_run_and_logs_when_a_boundary_is_crossed(capsys):
    module = load_example(DIST_SETUP)
    args = module.parse_flags(["--log_every", "25", "--steps_per_run", "10"])
    loop = module.TrainingLoop(args, FakeSession(), {"global_step": "g", "test_accuracy": "a"},
                               FakeWatchdog())
    for run in range(10):
        loop.step(np.full(10, float(run)), 10 * (run + 1))
    printed = [line for line in capsys.readouterr().out.splitlines() if "test accuracy" in line]
    # Boundaries at 25, 50, 75, 100 local steps: the runs that reach them end at 30, 50, 80, 100.
    assert [line.split()[2] for line in printed] == ["30", "50", "80", "100"], printed
    assert [point[1] for point in loop.curve] == [30, 50, 80, 100]
    assert loop.local_steps == 100 and loop.global_step == 100
    # The progress line averages the last --log_every step losses, not the last runs'.
    assert abs(float(printed[-1].split("loss ")[1].split()[0]) - np.mean(
        [9.0] * 10 + [8.0] * 10 + [7.0] * 5)) < 1e-3


def test_a_run_with_k_100_stops_within_k_steps_of_train_steps_and_checkpoints(tmp_path):
    """The real script, one ps and one worker: every run adds K to the global step and the
    stop check follows each run, so 250 steps end at 300; the checkpoint saver, which looks at
    the global step after each run, still saves."""
    log_dir = str(tmp_path / "run")
    cluster = run_cluster(DIST_SETUP, workers=1, args=[
        "--train_steps", "250", "--steps_per_run", "100", "--log_every", "100",
        "--log_dir", log_dir, "--checkpoint_every", "100"])
    [result] = worker_results(cluster)
    assert result["global_step"] == result["local_steps"] == 300, result
    assert result["steps_per_run"] == 100
    assert [point[1] for point in result["curve"]] == [100, 200, 300], output(cluster)
    assert os.path.exists(os.path.join(log_dir, "model.ckpt-300.index")), os.listdir(log_dir)
