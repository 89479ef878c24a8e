"""--steps_per_run K (issue 19): K training steps in one session.run, in a tf.while_loop.

The loop must not change the algorithm: K steps in one run leave θ, the global step and the
worker's own state exactly as K runs of one step (bit for bit: the same kernels on the same
minibatches, in the same order), with one worker and with two that interleave. The graphs are
built in this process and run on tf.train.Servers started here (as the exact-update tests of
test_asynchronous.py do, whose rules K = 1 checks). A script that does not build the loop refuses
K > 1 in one line, exit code 2, before any server starts; the TrainingLoop logs at the first run
that reaches each --log_every boundary; a real run stops within K − 1 steps past --train_steps,
and a real DynSGD run commits once per window and counts each commit's staleness. The
synchronous examples' loops (SSGD's steps; SAGN's and Local-SGD's rounds) run against the
chief's aggregation, and stop at the token of the last update.
"""
import argparse
import concurrent.futures
import os
import sys

import numpy as np
import pytest

from helpers import (ROOT, load_example, output, run_cluster, run_script,
                     sent_between_tasks, worker_results)
from test_asynchronous import cluster_flags, in_process_cluster, worker_args

import shared_helpers

DIST_SETUP = "Distributed-Setup/dist_setup.py"
HOGWILD = "Hogwild/Hogwild.py"
MULTI_GPU = "Multiple-GPUs-Single-Machine/dist_mult_gpu_sing_mach.py"
AGN = "AGN/AGN.py"
DOWNPOUR = "DOWNPOUR/DOWNPOUR.py"
DOWNPOUR_EASY = "DOWNPOUR-Easy/DOWNPOUR.py"
STALENESS = "Staleness-Aware-SGD/Staleness-Aware-SGD.py"
AEASGD = "AEASGD/AEASGD.py"
EAMSGD = "EAMSGD/EAMSGD.py"
DYNSGD = "DynSGD/DynSGD.py"
SSGD = "Synchronous-SGD/ssgd.py"
RATES = "Synchronous-SGD-different-learning-rates/ssgd.py"
SAGN = "SAGN/SAGN.py"
LOCAL_SGD = "Local-SGD/Local-SGD.py"
EVERY_STEP = [DIST_SETUP, HOGWILD, MULTI_GPU, STALENESS]  # one session.run is one step
SYNCHRONOUS = [SSGD, RATES]  # one step: gᵢ to the accumulators, then a token
WINDOWED = [AGN, DOWNPOUR, DOWNPOUR_EASY, AEASGD, EAMSGD, DYNSGD]  # T local steps, then a
# commit (or an elastic exchange); a window that divides the runs' K = 10 (AEASGD's default τ is
# 4; DynSGD's, 1, would not show a window inside the loop)
WINDOW = {AEASGD: ["--window", "5"], EAMSGD: ["--window", "5"], DYNSGD: ["--window", "5"]}
ROUNDS = [SAGN, LOCAL_SGD]  # both: each round pulls θ, makes T local steps, commits
# Δᵢ to the accumulators and takes a token
LOOPED = EVERY_STEP + WINDOWED
COLLECTIVE = ["AllReduce-SGD/AllReduce-SGD.py"]  # no ps: its loop's test is in test_allreduce.py
SCRIPTS = [os.path.relpath(path, ROOT) for path in shared_helpers.example_scripts()]
REFUSING = [script for script in SCRIPTS
            if script not in LOOPED + SYNCHRONOUS + ROUNDS + COLLECTIVE]


def fetched_by_the_lessons_loop(worker, name="train_op"):
    """What the lesson's loop fetches in each session.run: the global step after it (built[name]),
    the losses, and the staleness of its updates or commits where the example reports it."""
    built = worker.built
    return [built[name], built["loss"]] + ([built["staleness"]] if "staleness" in built else [])


def one_run(worker, windowed, window, local_steps):
    """What the lesson's loop runs once: (the global step or None, the losses of its steps, the
    staleness of its updates or commits where the example reports it)."""
    built = worker.built
    if windowed and (local_steps + worker.steps_per_run) % window:
        loss, _ = worker.session.run([built["loss"], built["local_step"]])
        return None, np.ravel(loss), []
    name = "local_step_and_commit" if windowed else "train_op"
    global_step, loss, *staleness = worker.session.run(fetched_by_the_lessons_loop(worker, name))
    return np.ravel(global_step)[-1], np.ravel(loss), [int(s) for s in np.ravel(staleness)]


def state(worker):
    """Every variable of the worker's graph (θ, the global step, θᵢ, slots, counters)."""
    tf = worker.graph
    with tf.as_default():
        variables = worker.module.tf.global_variables() + worker.module.tf.local_variables()
    return dict(zip([v.op.name for v in variables], worker.session.run(variables)))


def start(script, workers, steps_per_run, extra=(), ps=1):
    module, args, started = in_process_cluster(
        script, workers, ["--steps_per_run", str(steps_per_run)] + WINDOW.get(script, [])
        + list(extra), ps)
    for index, worker in enumerate(started):
        worker.module, worker.steps_per_run = module, steps_per_run
        worker.initialize(chief=index == 0)
    return args, started


def train(script, steps_per_run, schedule, workers=1, extra=(), ps=1):
    """Runs the workers in the order `schedule` names them (one session.run each); returns
    (every worker's state, its losses, the global steps the runs returned, the staleness its
    runs returned)."""
    args, started = start(script, workers, steps_per_run, extra, ps)
    windowed = script in WINDOWED
    losses, staleness = [[] for _ in started], [[] for _ in started]
    steps, done = [], [0] * workers
    for index in schedule:
        global_step, run_losses, run_staleness = one_run(
            started[index], windowed, getattr(args, "window", 1), done[index])
        losses[index] += list(run_losses)
        staleness[index] += run_staleness
        done[index] += len(run_losses)
        steps.append(global_step)
    return [state(worker) for worker in started], losses, steps, staleness


def assert_identical(states, expected_states):
    for got, expected in zip(states, expected_states):
        assert sorted(got) == sorted(expected)
        for name in expected:
            assert np.array_equal(got[name], expected[name]), name


@pytest.mark.tf2
@pytest.mark.parametrize("script", LOOPED)
def test_k_steps_in_one_run_are_k_single_steps_bit_for_bit(script):
    """One worker: K = 10 for 2 runs against K = 1 for 20 runs, from the same seed. Where the
    example reports a staleness (of each update; of each commit, one per window), the runs of
    K = 10 return as many, and the same."""
    looped, looped_losses, looped_steps, looped_staleness = train(script, 10, [0, 0])
    single, single_losses, single_steps, single_staleness = train(script, 1, [0] * 20)
    assert_identical(looped, single)
    assert looped_losses == single_losses and len(looped_losses[0]) == 20
    assert looped_staleness == single_staleness
    assert len(looped_staleness[0]) == {STALENESS: 20, DYNSGD: 20 // 5}.get(script, 0)
    assert looped[0]["global_step"] == 20 and looped_steps == [10, 20]
    assert [step for step in single_steps if step is not None][-1] == 20


@pytest.mark.parametrize("script", [HOGWILD, AGN, AEASGD, DYNSGD])
def test_two_workers_interleaving_runs_of_k_are_their_single_steps_interleaved(script):
    """Two workers take turns, a run of K = 10 each, against the same turns made of 10 runs of
    one step: θ on the ps, each worker's state and every loss agree exactly, so the K = 1 exact
    tests (test_asynchronous.py, test_beyond.py) hold for K = 10 too. DynSGD's commits return
    the same staleness s, not all 0 here: a worker's first commit in its turn counts the other's
    commits since its last pull."""
    turns = [0, 1, 1, 0, 1, 0]
    looped, looped_losses, _, looped_staleness = train(script, 10, turns, workers=2)
    single, single_losses, _, single_staleness = train(
        script, 1, [i for i in turns for _ in range(10)], workers=2)
    assert_identical(looped, single)
    assert looped_losses == single_losses
    assert looped[0]["global_step"] == 60
    assert looped_staleness == single_staleness
    if script == DYNSGD:  # 2 commits a turn: the first counts the other's since the last turn
        assert looped_staleness == [[0, 0, 4, 0, 2, 0], [2, 0, 0, 0, 2, 0]], looped_staleness


@pytest.mark.parametrize("script", [DIST_SETUP, STALENESS, DYNSGD, AGN, AEASGD])
def test_with_three_ps_tasks_the_steps_are_the_same_and_k_steps_are_still_k_single_steps(
        script):
    """θ, the global step and DynSGD's counter spread over three ps tasks (replica_device_setter's
    round robin), as on a cluster with several: each ps task sends its part of θ and takes its
    part of g (or Δᵢ, or θᵢ) in a message of its own. Where θ lives must not change a number:
    one worker, K = 1 twenty times, leaves the state it leaves with one ps task, and K = 10
    twice leaves it too, bit for bit. Each read of θ is an op of its own that waits for what
    it must follow (the commit, the lock, the update before): a read that waited only through
    a constant's control edge (the pack's shape) was not held back, so a pull after a commit
    took the old θ of a ps task that held one variable (AGN, K = 1). A critical section on ps 0
    copies what it reads on the variable's own task, after the lock: read by an op on ps 0, a
    variable of another task would be sent when that task's step began (DynSGD and
    Staleness-Aware-SGD, K = 10)."""
    looped, looped_losses, looped_steps, looped_staleness = train(script, 10, [0, 0], ps=3)
    single, single_losses, _, single_staleness = train(script, 1, [0] * 20, ps=3)
    one_ps, one_ps_losses, _, _ = train(script, 1, [0] * 20, ps=1)
    assert_identical(single, one_ps)
    assert single_losses == one_ps_losses
    assert_identical(looped, single)
    assert looped_losses == single_losses and len(looped_losses[0]) == 20
    assert looped_staleness == single_staleness
    assert looped[0]["global_step"] == 20 and looped_steps == [10, 20]
    module = load_example(script)
    with module.tf.Graph().as_default():
        module.build_graph(worker_args(module, cluster_flags(1, ps=3), 0, WINDOW.get(script, [])))
        devices = {v.device for v in module.tf.global_variables()}
    assert devices == {"/job:ps/task:%d" % i for i in range(3)}, devices


def test_in_the_loop_hogwild_still_updates_theta_on_the_ps_without_a_lock():
    """The K = 100 graph: θ's update inside the while_loop runs on the ps, lock-free."""
    _, [worker] = start(HOGWILD, 1, 100)
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


@pytest.mark.parametrize("script", [DIST_SETUP, HOGWILD, STALENESS])
def test_in_the_loop_a_step_is_one_round_trip_to_the_ps(script):
    """K = 10, fetching what the lesson's loop fetches (the global step, the losses and, in
    Staleness-Aware-SGD, each step's staleness τ). The loop variable that carries the global
    step lives on the ps, so the worker never waits for it. Per iteration the worker sends the
    ps its gradient and the loop's go-on (the predicate that drives the ps's part of the loop),
    and the ps sends θ, and τ where it is reported (made on the ps, kept in an array on the
    worker): nothing else. With that loop
    variable on the worker, the new global step would travel to the worker too, and the
    worker's next iteration would wait for it: a second round trip per step. Were the losses
    written after the update, or the ps's constants started by the worker's go-ahead, each
    would be one more message per iteration. Each task runs its part of the loop one iteration
    at a time, so the ps reads θ only after the update before: θ stays bit for bit (the test
    above)."""
    _, [worker] = start(script, 1, 10)
    sent = crossings_in_the_loop(worker, fetched_by_the_lessons_loop(worker))
    to_ps, to_worker = ("/job:worker/task:0", "/job:ps/task:0"), ("/job:ps/task:0",
                                                                 "/job:worker/task:0")
    assert set(sent) == {to_ps, to_worker}, sent
    assert len(sent[to_ps]) == 2 and any("LoopCond" in name for name in sent[to_ps]), sent
    assert len(sent[to_worker]) == 1 + ("staleness" in worker.built), sent
    merges = [op for op in worker.graph.get_operations()
              if op.type in ("Merge", "RefMerge") and op.name.startswith("while/")
              and op.outputs[0].dtype.base_dtype == worker.module.tf.int64]
    assert [op.device for op in merges] == ["/job:ps/task:0"], merges
    # What keeps the ps's read of θ after the update before: one iteration at a time, in each
    # task's part of the loop (a race would rarely show in θ, so this is pinned).
    enters = [op for op in worker.graph.get_operations() if op.type in ("Enter", "RefEnter")]
    assert enters and {op.get_attr("parallel_iterations") for op in enters} == {1}


@pytest.mark.parametrize("script", SYNCHRONOUS)
def test_in_the_loop_a_synchronous_step_is_one_round_trip_to_the_ps(script):
    """K = 10, N = M = 1, with the chief's aggregation running. The token stays on the ps, in
    the worker's step tag there, and the loop decides on the ps whether to go on (the token's
    global step against --train_steps): per iteration the worker sends its gradient alone and
    the ps sends θ and the go-on. Were the go-on decided on the worker, the token would come
    to the worker and the go-on go back before the ps could read θ for the next step: two
    round trips per step. The worker counts its own writes of the losses, so the iteration's
    index stays on the ps, and its reads of the input pipeline start on a go-ahead of its
    own, not on the ps's. --train_steps 10: the run's 10 steps make the last update, so that
    the chief's aggregation ends with it."""
    args, [worker] = start(script, 1, 10, ["--train_steps", "10"])
    hook = synchronous_hook(args, 0, worker)
    try:
        sent = crossings_in_the_loop(worker, fetched_by_the_lessons_loop(worker))
    finally:
        hook.end(worker.session)
    assert not any(thread.is_alive() for thread in hook.threads), "ended"
    worker_to_ps, ps_to_worker = (("/job:worker/task:0", "/job:ps/task:0"),
                                  ("/job:ps/task:0", "/job:worker/task:0"))
    assert set(sent) == {worker_to_ps, ps_to_worker}, sent
    assert len(sent[worker_to_ps]) == 1 and "LoopCond" not in sent[worker_to_ps][0], sent
    assert len(sent[ps_to_worker]) == 2, sent
    assert any(name.endswith("while/LoopCond") for name in sent[ps_to_worker]), sent


@pytest.mark.parametrize("script", [AEASGD, EAMSGD])
def test_in_the_loop_the_elastic_exchange_still_runs_under_the_one_lock_on_the_ps(script):
    """The K = 100 graph (25 windows of τ = 4): the exchange inside the while_loop takes the
    lock on the ps that every worker shares, and moves x̃ there."""
    module = load_example(script)
    args = worker_args(module, cluster_flags(2), 1, ["--steps_per_run", "100"])
    with module.tf.Graph().as_default() as graph:
        module.build_graph(args)
    operations = graph.get_operations()
    assert any(op.type == "Exit" for op in operations), "a tf.while_loop"
    locks = [op for op in operations if op.type == "MutexLock"]
    mutexes = [op for op in operations if op.type == "MutexV2"]
    assert locks and all(op.device == "/job:ps/task:0" for op in locks + mutexes)
    assert {op.get_attr("shared_name") for op in mutexes} == {b"elastic_exchange_lock"}
    on_the_ps = {op: variable_entering_the_loop(op.inputs[0]) for op in operations
                 if op.type == "AssignAdd" and op.device == "/job:ps/task:0"}
    assert sorted(on_the_ps.values()) == ["global_step", "hidden_biases", "hidden_weights",
                                          "output_biases", "output_weights"]
    assert all(op.name.startswith("while/critical_section_execute/") for op in on_the_ps)


def variable_entering_the_loop(tensor):
    while tensor.op.type in ("Enter", "RefEnter"):
        tensor = tensor.op.inputs[0]
    return tensor.op.name


@pytest.mark.parametrize("script", REFUSING)
def test_a_script_without_the_loop_refuses_k_above_1_in_one_line(script, capsys):
    module = load_example(script)
    with pytest.raises(SystemExit) as exit_info:
        module.parse_flags(["--steps_per_run", "10"])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(error.strip().splitlines()) == 1, error
    assert "--steps_per_run 10: this example takes one step per session.run (" in error, error
    assert module.parse_flags([]).steps_per_run == 1


def test_a_script_that_says_nothing_refuses_k_above_1(tmp_path):
    """A new example (written with today's appendix, no word about the loop) refuses K > 1:
    its Python loop, one step per run, is then still right."""
    source = open(os.path.join(ROOT, DIST_SETUP)).read()
    source = source.replace("\nMANY_STEPS_PER_RUN = True", "\n")
    path = tmp_path / "new_example.py"
    path.write_text(source)
    code, text = run_script([sys.executable, str(path), "--steps_per_run", "2"], timeout=60)
    assert code == 2, text
    assert text.strip().splitlines() == [
        "new_example.py: error: --steps_per_run 2: this example takes one step per session.run "
        "(its training loop is not built for it): leave it at 1 (see --help)"], text


@pytest.mark.parametrize("script", WINDOWED + ROUNDS)
def test_a_windowed_example_refuses_k_that_would_end_a_run_inside_a_window(script, capsys):
    module = load_example(script)
    with pytest.raises(SystemExit) as exit_info:
        module.parse_flags(["--window", "5", "--steps_per_run", "12"])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(error.strip().splitlines()) == 1, error
    assert "a multiple of --window" in error, error
    assert module.parse_flags(["--window", "5", "--steps_per_run", "20"]).steps_per_run == 20


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


# ---------------------------------------------------------------------------------------------
# The synchronous family: each iteration sends gᵢ and takes a token from the chief's aggregation.
# ---------------------------------------------------------------------------------------------
RUN_BOUND_MS = 30000  # a step that waits for a token that never comes fails instead of hanging


def synchronous_train(script, steps_per_run, runs, train_steps, extra=(), workers=1):
    """N = M workers, in this process: SynchronousTrainingHook's aggregation runs in the chief's
    thread, as in the real script, while each worker makes `runs` runs of the lesson's loop (K
    steps; SAGN's and Local-SGD's K = 1: a round), two workers each in a thread of its own.
    Returns (each worker's state, its losses, the tokens its runs returned)."""
    args, started = start(script, workers, steps_per_run,
                          ["--train_steps", str(train_steps)] + list(extra))
    module = started[0].module
    hooks = [synchronous_hook(args, index, worker) for index, worker in enumerate(started)]
    options = module.tf.RunOptions(timeout_in_ms=RUN_BOUND_MS)
    window = args.window if script in ROUNDS else 1

    def train_one(worker):
        runs_made = [one_synchronous_run(worker, window, options) for _ in range(runs)]
        return ([float(loss) for _, losses in runs_made for loss in np.ravel(losses)],
                [int(token) for token, _ in runs_made])

    try:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            losses, tokens = zip(*pool.map(train_one, started))
    finally:
        for hook, worker in zip(hooks, started):
            hook.end(worker.session)
    assert not any(thread.is_alive() for hook in hooks for thread in hook.threads), "ended"
    return [state(worker) for worker in started], list(losses), list(tokens)


def synchronous_hook(args, index, worker):
    """The script's SynchronousTrainingHook for worker<index>, started on its session: on the
    chief (index 0) it runs the aggregation in a thread, as in the real script."""
    with worker.graph.as_default():
        hook = worker.module.SynchronousTrainingHook(
            argparse.Namespace(**dict(vars(args), task_index=index)), None, worker.built,
            FakeWatchdog())
    hook.after_create_session(worker.session, None)
    return hook


def with_the_loops_tag_in_place(states):
    """Each worker's state, with its step tag where K = 1 keeps it: the loop's tag is a variable
    on the ps, sync_rep_tag_worker<i>; the optimizer's own, on the worker, is K = 1's, which the
    loop leaves at the global step of the session's start."""
    for index, state in enumerate(states):
        state["sync_rep_local_step"] = state.pop("sync_rep_tag_worker%d" % index)
    return states


def one_synchronous_run(worker, window, options):
    """What the lesson's loop runs once: (the token it took last, the losses of its steps).
    K synchronous steps, or K / T rounds, in one session.run; or SAGN's and Local-SGD's round
    of K = 1, as their lessons run it: pull, T local steps, commit, each its own session.run."""
    built, run = worker.built, worker.session.run
    if "local_step_and_commit" in built or "train_op" in built:
        name = "local_step_and_commit" if "local_step_and_commit" in built else "train_op"
        return run([built[name], built["loss"]], options=options)
    run(built["pull"], options=options)
    losses = [run([built["local_step"], built["loss"]], options=options)[1]
              for _ in range(window)]
    return run(built["commit"], options=options), losses


@pytest.mark.tf2
@pytest.mark.parametrize("script", SYNCHRONOUS)
def test_k_synchronous_steps_in_one_run_are_k_single_steps_and_none_after_the_last(script):
    """K = 10 for 2 runs against K = 1 for 15 runs, --train_steps 15, with the chief's
    aggregation running: θ, the global step, the worker's step tag and every loss agree bit for
    bit. The second run stops after 5 steps, at the token of the last update: a
    sixth would send a gradient that no update takes and wait for a token that never comes (the
    bounded run fails)."""
    [looped], [looped_losses], [looped_tokens] = synchronous_train(script, 10, 2, 15)
    [single], [single_losses], [single_tokens] = synchronous_train(script, 1, 15, 15)
    assert_identical(with_the_loops_tag_in_place([looped]), [single])
    assert single["sync_rep_local_step"] == 15
    assert looped_losses == single_losses and len(looped_losses) == 15
    assert looped_tokens == [10, 15] and single_tokens == list(range(1, 16))
    assert looped["global_step"] == 15


@pytest.mark.parametrize("workers", [1, 2], ids=["one-worker", "two-workers"])
@pytest.mark.parametrize("script", ROUNDS)
def test_k_over_t_rounds_in_one_run_are_the_lessons_rounds_and_none_after_the_last(script,
                                                                                   workers):
    """T = 4, K = 8 (two rounds a run) for 3 runs against the lesson's K = 1 loop for 5 rounds
    (pull, 4 local steps, commit: 6 session.runs a round), --train_steps 5, with the chief's
    aggregation running: θ, the global step, θᵢ and the round's start, the worker's step tag
    and every loss agree bit for bit. The third run stops after one round, at the token of the
    last update: a second would commit Δᵢ that no update takes and wait for a token that never
    comes (the bounded run fails). With two workers (N = M = 2, each in its thread) each commit
    is weighted as with K = 1 (Local-SGD's nₖ/n is 1 with one worker); the result does not
    depend on their timing: an update needs both commits, so both are waiting for its tokens,
    and a sum of two is the same in either order."""
    window = ["--window", "4"]
    looped, looped_losses, looped_tokens = synchronous_train(script, 8, 3, 5, window, workers)
    single, single_losses, single_tokens = synchronous_train(script, 1, 5, 5, window, workers)
    assert_identical(with_the_loops_tag_in_place(looped), single)
    assert looped_losses == single_losses
    assert [len(losses) for losses in looped_losses] == [20] * workers
    assert looped_tokens == [[2, 4, 5]] * workers
    assert single_tokens == [[1, 2, 3, 4, 5]] * workers
    assert looped[0]["global_step"] == 5
    assert any("round_start" in name for name in looped[0])  # (its state is compared too)


@pytest.mark.parametrize("script, window, rounds", [(SAGN, 4, 301), (LOCAL_SGD, 10, 101)])
def test_a_run_of_rounds_with_k_2t_ends_at_train_steps_and_every_task_exits_0(script, window,
                                                                               rounds):
    """The real script, two workers, K = 2T: an odd --train_steps, so that each worker's last
    run stops after one of its two rounds, at the token of the last update. The run ends at
    exactly --train_steps updates, every task exits 0, the ps hears from both workers, each
    worker made T local steps per round, and the model learned."""
    cluster = run_cluster(script, workers=2, args=[
        "--window", str(window), "--steps_per_run", str(2 * window), "--train_steps",
        str(rounds), "--log_every", "200"])
    results = worker_results(cluster)
    assert [r["global_step"] for r in results] == [rounds] * 2, results
    assert [r["local_steps"] for r in results] == [window * rounds] * 2, results
    assert all(r["steps_per_run"] == 2 * window for r in results)
    assert all(r["test_accuracy"] >= 0.9 for r in results), results
    assert "all 2 workers are done; exiting" in output(cluster, "ps0")


@pytest.mark.parametrize("workers, extra", [
    (2, []), (3, ["--replicas_to_aggregate", "2"])], ids=["two-workers", "a-backup-worker"])
def test_a_synchronous_run_with_k_10_ends_at_train_steps_and_every_task_exits_0(workers, extra):
    """The real script: every worker's loop stops at the token of the last update, so the run
    ends at exactly --train_steps updates, with no one left waiting (each task exits 0, the ps
    hears from every worker). With N = M each worker made one step per update."""
    cluster = run_cluster(SSGD, workers=workers, args=[
        "--train_steps", "505", "--steps_per_run", "10", "--log_every", "100"] + extra)
    results = worker_results(cluster)
    assert [r["global_step"] for r in results] == [505] * workers, results
    assert all(r["steps_per_run"] == 10 for r in results)
    assert all(r["test_accuracy"] >= 0.9 for r in results), results
    if not extra:
        assert [r["local_steps"] for r in results] == [505] * workers, results
    else:  # the updates took 2 of the 3 workers' gradients: at least 2 x 505 steps together
        assert sum(r["local_steps"] for r in results) >= 2 * 505, results
    assert "all %d workers are done; exiting" % workers in output(cluster, "ps0")


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


@pytest.mark.parametrize("steps_per_run", [1, 20])
def test_a_dynsgd_run_commits_once_per_window_and_reports_every_commit_s(steps_per_run):
    """The real script (its train(), not this file's one_run), two workers, T = 5: with K = 1 a
    commit follows every fifth local step, with K = 20 each run is four windows. Either way each
    worker's commits are its local steps / T, each counted once in its summary (one s per
    commit, not per run), and the global step, which only commits move, ends at every worker's
    steps together."""
    cluster = run_cluster(DYNSGD, workers=2, args=[
        "--window", "5", "--steps_per_run", str(steps_per_run), "--train_steps", "400",
        "--log_every", "100"])
    results = worker_results(cluster)
    assert all(r["steps_per_run"] == steps_per_run for r in results), results
    assert all(r["local_steps"] % max(steps_per_run, 5) == 0 for r in results), results
    assert [r["commits"] for r in results] == [r["local_steps"] // 5 for r in results], results
    assert max(r["global_step"] for r in results) == sum(r["local_steps"] for r in results)
    for task, result in zip(("worker0", "worker1"), results):
        assert "%d commits, staleness s: mean" % result["commits"] in output(cluster, task)


@pytest.mark.parametrize("script", ROUNDS)
def test_a_session_created_mid_round_pulls_theta_before_the_round_goes_on(script, monkeypatch):
    """A session (re-)created mid-round, after its ps came back, holds θᵢ and the round's start
    at their initial values; the lesson's PullWhenTheSessionIsCreated runs the pull there, so
    that the rest of the round steps from the ps's θ. train() hands it to the session, and
    running it sets both to θ (here θ on the ps is moved away from the initial values first)."""
    _, [worker] = start(script, 1, 1)
    module, built = worker.module, worker.built
    tf = module.tf
    with worker.graph.as_default():
        params = tf.trainable_variables()
        moved = [tf.assign_add(param, tf.ones_like(param)) for param in params]
    theta = worker.session.run(moved)

    def copies(prefix):
        values = state(worker)
        return [values[prefix + param.op.name] for param in params]

    for prefix in ("local/", "round_start/"):
        assert not any(np.array_equal(v, t) for v, t in zip(copies(prefix), theta)), prefix

    handed = []

    class Handed(Exception):
        pass

    def training_session(args, server, graph, watchdog, hooks):
        handed.extend(hooks)
        raise Handed()

    monkeypatch.setattr(module, "training_session", training_session)
    monkeypatch.setattr(module, "SynchronousTrainingHook", lambda *args: "synchronous")
    args = worker_args(module, cluster_flags(1), 0, [])
    with tf.Graph().as_default(), pytest.raises(Handed):
        module.train(args, None, None)
    assert [type(hook).__name__ for hook in handed] == ["str", "PullWhenTheSessionIsCreated"]

    module.PullWhenTheSessionIsCreated(built["pull"]).after_create_session(worker.session, None)
    for prefix in ("local/", "round_start/"):
        assert all(np.array_equal(v, t) for v, t in zip(copies(prefix), theta)), prefix
