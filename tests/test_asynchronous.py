"""The asynchronous family: Hogwild/, DOWNPOUR/, DOWNPOUR-Easy/ and AGN/.

Runs with default settings are real clusters on free localhost ports. The exact-update tests
build each script's graph in this process and run it on tf.train.Servers (a ps and two workers)
started here: they fetch the gradients each step used and recompute, with NumPy, what the local
optimizer and one commit must have done to θᵢ and to θ on the ps.
"""
import re
import sys

import numpy as np
import pytest

from helpers import (LocalCluster, assert_no_process_left, example, free_ports, load_example,
                     output, results_in, run_script, sent_between_tasks, start_the_chief_last,
                     worker_results, UNHURRIED_CHIEF)

HOGWILD = "Hogwild/Hogwild.py"
DOWNPOUR = "DOWNPOUR/DOWNPOUR.py"
DOWNPOUR_EASY = "DOWNPOUR-Easy/DOWNPOUR.py"
AGN = "AGN/AGN.py"
WINDOWED = [DOWNPOUR, DOWNPOUR_EASY, AGN]
SCRIPTS = [HOGWILD] + WINDOWED
DEFAULT_WINDOW = 5
ADAGRAD_INITIAL_ACCUMULATOR = 0.1  # tf.train.AdagradOptimizer's default


def run_non_chiefs_first(script, workers=2, args=(), task_args=None, timeout=120):
    """Run to the end with every non-chief worker started before the chief, so that each must
    wait for the chief's θ: one that polled every 30 s, as TensorFlow's own non-chiefs do, would
    miss the run. The chief is UNHURRIED_CHIEF. task_args: {"worker1": [flags]}. Asserts that
    every process exited 0."""
    cluster = LocalCluster(example(script), workers=workers, args=args, echo=False,
                           task_args=dict({"worker0": UNHURRIED_CHIEF}, **(task_args or {})))
    try:
        start_the_chief_last(cluster)
        assert cluster.wait(timeout), "not finished in %d s, or a task failed: %s\n%s" % (
            timeout, cluster.returncodes(), output(cluster))
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert set(cluster.returncodes().values()) == {0}, output(cluster)
    assert "all %d workers are done" % workers in output(cluster, "ps0")
    return cluster


# ---------------------------------------------------------------------------------------------
# Default settings: accuracy, and the global step counts every worker's minibatch steps.
# ---------------------------------------------------------------------------------------------
@pytest.mark.tf2
def test_hogwild_reaches_accuracy_and_global_step_is_the_sum_of_local_steps():
    results = worker_results(run_non_chiefs_first(HOGWILD))
    assert min(r["test_accuracy"] for r in results) >= 0.93, results
    # Every local step applied one update to θ on the ps; the last worker to finish saw them all.
    assert max(r["global_step"] for r in results) == sum(r["local_steps"] for r in results)
    assert 1000 <= max(r["global_step"] for r in results) < 1000 + 2
    # worker1 started first and waited for the chief's θ, not for a 30 s readiness poll.
    assert results[1]["local_steps"] > 0 and results[1]["first_global_step"] < 1000, results


@pytest.mark.tf2
@pytest.mark.parametrize("script", WINDOWED)
def test_windowed_reaches_accuracy_with_one_commit_per_window(script):
    results = worker_results(run_non_chiefs_first(script))
    assert min(r["test_accuracy"] for r in results) >= 0.93, results
    for r in results:
        assert r["local_steps"] == DEFAULT_WINDOW * r["commits"] > 0, r
    # A commit adds T to the global step: it counts minibatch steps, like Hogwild's.
    commits = sum(r["commits"] for r in results)
    assert max(r["global_step"] for r in results) == DEFAULT_WINDOW * commits
    assert 1000 <= DEFAULT_WINDOW * commits < 1000 + 2 * DEFAULT_WINDOW
    assert results[1]["first_global_step"] < 1000, results


def test_four_workers_with_run_sh():
    """run.sh starts every task at once; on a loaded machine the chief, first to have θ ready,
    then made 177-200 of the 200 commits alone, on its quarter of the data (each worker trains
    on its own shard), and the others' first windows landed at the end: 0.936-0.967 in 12 runs
    at 6 at a time, and 0.889 once in CI. Every worker held to 100 steps/s (UNHURRIED_CHIEF's
    pace): 22-106 commits each and 0.961-0.972 in 12 such runs."""
    code, text = run_script(["bash", example("AGN/run.sh")] + UNHURRIED_CHIEF, timeout=180,
                            env={"WORKERS": "4", "PYTHON": sys.executable})
    assert code == 0, text
    results = sorted(results_in(text), key=lambda r: r["task_index"])
    assert [r["task_index"] for r in results] == [0, 1, 2, 3], text
    assert all(r["commits"] > 0 for r in results), results
    assert min(r["test_accuracy"] for r in results) >= 0.93, results
    assert max(r["global_step"] for r in results) == DEFAULT_WINDOW * sum(
        r["commits"] for r in results)
    assert re.search(r"^agn: 4 worker\(s\)", text, re.M), text


# ---------------------------------------------------------------------------------------------
# Nobody waits for anybody: a straggler does not slow the others, a dead worker stops no one.
# ---------------------------------------------------------------------------------------------
def test_hogwild_a_slow_worker_does_not_slow_the_other():
    cluster = run_non_chiefs_first(HOGWILD, task_args={"worker1": ["--step_delay", "0.1"]})
    fast, slow = worker_results(cluster)
    # worker1 sleeps 0.1 s after each step, so it makes at most 10 steps a second, worker0 (10 ms
    # a step) up to 100; had worker0 waited for it, both would have made about as many steps.
    assert slow["local_steps"] > 0, slow
    assert fast["local_steps"] >= 3 * slow["local_steps"], (fast, slow)
    assert max(fast["global_step"], slow["global_step"]) == (fast["local_steps"]
                                                             + slow["local_steps"])


# ---------------------------------------------------------------------------------------------
# Where things live: θ on the ps, θᵢ and the computation on the worker.
# ---------------------------------------------------------------------------------------------
def cluster_flags(workers, ps=1):
    hosts = ["localhost:%d" % port for port in free_ports(ps + workers)]
    return ["--ps_hosts", ",".join(hosts[:ps]), "--worker_hosts", ",".join(hosts[ps:])]


def worker_args(module, cluster, task_index, extra=()):
    return module.parse_flags(["--job_name", "worker", "--task_index", str(task_index)]
                              + cluster + list(extra))


@pytest.mark.tf2
@pytest.mark.parametrize("script", SCRIPTS)
def test_theta_lives_on_the_ps_and_the_computation_on_the_worker(script):
    module = load_example(script)
    tf, worker = module.tf, "/job:worker/task:1"
    args = worker_args(module, cluster_flags(2), 1)
    with tf.Graph().as_default() as graph:
        built = module.build_graph(args)
        params = [v for v in tf.global_variables() if v.op.name in {
            "hidden_weights", "hidden_biases", "output_weights", "output_biases"}]
        assert len(params) == 4
        # Every global variable is on the ps: θ, the global step, DOWNPOUR's ps Adagrad.
        expected = {HOGWILD: 5, DOWNPOUR: 9, DOWNPOUR_EASY: 5, AGN: 5}[script]
        assert len(tf.global_variables()) == expected, tf.global_variables()
        assert all(v.device == "/job:ps/task:0" for v in tf.global_variables())
        # θᵢ and whatever else a worker keeps (the window's sum, θᵢ at pull, the local Adagrad's
        # accumulators) are local variables on this worker: never initialized by the chief,
        # never saved, never shared.
        expected = {HOGWILD: 0, DOWNPOUR: 12, DOWNPOUR_EASY: 8, AGN: 8}[script]
        assert len(tf.local_variables()) == expected, tf.local_variables()
        assert all(v.device == worker for v in tf.local_variables())
        # The forward and backward passes run here ...
        gradient_ops = [op for op in graph.get_operations() if op.name.startswith("gradients")]
        assert gradient_ops and all(op.device == worker for op in gradient_ops)
        assert built["loss"].device == worker
        # ... and every op that updates θ (besides its initializer) runs on the ps, next to θ.
        writes = [op for op in graph.get_operations() if op.inputs and op.type.startswith(
            ("Apply", "AssignAdd")) and op.inputs[0].op in [p.op for p in params]]
        assert {op.inputs[0].op.name for op in writes} == {p.op.name for p in params}
        assert all(op.device == "/job:ps/task:0" for op in writes), [
            (op.name, op.device) for op in writes]


# ---------------------------------------------------------------------------------------------
# Exact updates: the graph run on servers in this process, the rules recomputed with NumPy.
# ---------------------------------------------------------------------------------------------
SERVERS = []  # tf.train.Server cannot be stopped in TensorFlow 1.x; they live until pytest ends


class InProcessWorker:
    """One worker's graph and session, on a cluster of servers started in this process."""

    def __init__(self, module, args):
        tf = module.tf
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.built = module.build_graph(args)
            self.initialize_global = tf.global_variables_initializer()
            # The script's own, or what a default tf.train.Scaffold runs (AEASGD's θᵢ)
            self.local_init = self.built.get("local_init_op", tf.local_variables_initializer())
        server = [s for s in SERVERS if s.target.endswith(
            args.cluster["worker"][args.task_index])][0]
        self.session = tf.Session(server.target, graph=self.graph,
                                  config=module.session_config(args))

    def initialize(self, chief):
        """θ by the chief (a fresh start), then this worker's local variables (it pulls θ)."""
        if chief:
            self.session.run(self.initialize_global)
        self.session.run(self.local_init)

    def run(self, name, *fetches):
        return self.session.run([self.built[name]] + [self.built[f] for f in fetches])[1:]

    def theta(self):
        return self.session.run(self.built["params"])

    def local_theta(self):
        return self.session.run(self.built["local_params"])


def in_process_cluster(script, workers, extra, ps=1):
    """ps tasks and workers as servers in this process; returns (module, flags, [worker])."""
    module, cluster = load_example(script), cluster_flags(workers, ps)
    args = [worker_args(module, cluster, index, extra) for index in range(workers)]
    spec = module.tf.train.ClusterSpec(args[0].cluster)
    SERVERS.extend(module.tf.train.Server(spec, job_name="ps", task_index=index)
                   for index in range(ps))
    for index in range(workers):
        SERVERS.append(module.tf.train.Server(spec, job_name="worker", task_index=index,
                                              config=module.session_config(args[index])))
    return module, args[0], [InProcessWorker(module, a) for a in args]


def assert_close(actual, expected):
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=2e-5, atol=1e-6)


class NumPyWorker:
    """What one worker's local state must be: θᵢ, θᵢ at pull, the local optimizer's slots."""

    def __init__(self, script, learning_rate, theta):
        self.adagrad = script == DOWNPOUR
        self.learning_rate = learning_rate
        self.accumulators = [np.full_like(value, ADAGRAD_INITIAL_ACCUMULATOR) for value in theta]
        self.pull(theta)

    def pull(self, theta):
        self.at_pull = [value.astype(np.float64) for value in theta]
        self.theta = [value.astype(np.float64) for value in theta]
        self.gradients = []

    def step(self, gradients):
        self.gradients.append(gradients)
        for i, g in enumerate(gradients):
            if self.adagrad:
                self.accumulators[i] = self.accumulators[i] + g * g
                self.theta[i] = self.theta[i] - self.learning_rate * g / np.sqrt(
                    self.accumulators[i])
            else:
                self.theta[i] = self.theta[i] - self.learning_rate * g


class NumPyParameterServer:
    """What one commit must do to θ on the ps (ALGORITHMS.md)."""

    def __init__(self, script, learning_rate, window, theta):
        self.script, self.learning_rate, self.window = script, learning_rate, window
        self.theta = [value.astype(np.float64) for value in theta]
        self.accumulators = [np.full_like(value, ADAGRAD_INITIAL_ACCUMULATOR) for value in theta]

    def commit(self, worker):
        summed = [sum(step[i] for step in worker.gradients) for i in range(len(self.theta))]
        for i, total in enumerate(summed):
            if self.script == DOWNPOUR:  # the ps's Adagrad applies the window's summed gradient
                self.accumulators[i] = self.accumulators[i] + total * total
                self.theta[i] = self.theta[i] - self.learning_rate * total / np.sqrt(
                    self.accumulators[i])
            elif self.script == DOWNPOUR_EASY:  # the ps's SGD applies it
                self.theta[i] = self.theta[i] - self.learning_rate * total
            else:  # AGN: θ ← θ + Δᵢ, Δᵢ = (θᵢ after T steps − θᵢ at pull) / T = −(η/T)·Σg
                delta = (worker.theta[i] - worker.at_pull[i]) / self.window
                np.testing.assert_allclose(delta, -self.learning_rate / self.window * total,
                                           rtol=1e-6, atol=1e-9)
                self.theta[i] = self.theta[i] + delta


def local_steps(worker, model, count):
    """count local steps (no commit), each checked against the NumPy worker."""
    for _ in range(count):
        [gradients] = worker.run("local_step", "gradients")
        model.step(gradients)
        assert_close(worker.local_theta(), model.theta)


def last_step_and_commit(worker, model, ps):
    """The window's last step and the commit; returns θᵢ as the window left it."""
    [gradients] = worker.run("local_step_and_commit", "gradients")
    model.step(gradients)
    ps.commit(model)
    after_window = model.theta
    model.pull(ps.theta)
    return after_window


@pytest.mark.tf2
@pytest.mark.parametrize("script", WINDOWED)
def test_commits_change_theta_on_the_ps_exactly_as_the_update_rule_says(script):
    window = 3
    _, args, (chief, other) = in_process_cluster(script, 2, ["--window", str(window)])
    learning_rate = args.learning_rate
    chief.initialize(chief=True)
    initial = chief.theta()
    ps = NumPyParameterServer(script, learning_rate, window, initial)
    chief_model = NumPyWorker(script, learning_rate, initial)
    assert_close(chief.local_theta(), initial)

    # The chief's first window: T local steps from the θ it initialized, then one commit.
    local_steps(chief, chief_model, window - 1)
    assert_close(chief.theta(), initial)  # local steps leave θ alone
    last_step_and_commit(chief, chief_model, ps)
    assert_close(chief.theta(), ps.theta)
    assert_close(chief.local_theta(), ps.theta)  # pulled for the next window

    # The other worker joins now: it starts from the global θ, not from the initial values.
    other.initialize(chief=False)
    assert_close(other.local_theta(), ps.theta)
    assert not np.allclose(other.local_theta()[0], initial[0])
    other_model = NumPyWorker(script, learning_rate, ps.theta)

    # The chief is mid-window when the other worker commits; its own commit, computed from the
    # θ it pulled before, is applied to θ as the other worker left it.
    local_steps(chief, chief_model, window - 1)
    local_steps(other, other_model, window - 1)
    last_step_and_commit(other, other_model, ps)
    assert_close(other.theta(), ps.theta)
    stale = last_step_and_commit(chief, chief_model, ps)
    assert_close(chief.theta(), ps.theta)
    # The chief goes on from the pulled global θ, not from its stale local copy.
    assert_close(chief.local_theta(), ps.theta)
    assert not np.allclose(chief.local_theta()[0], stale[0], rtol=1e-3, atol=1e-5)
    assert chief.session.run(chief.built["global_step"]) == 3 * window


@pytest.mark.parametrize("script, back", [(script, 3) for script in WINDOWED] + [
    ("AEASGD/AEASGD.py", 2), ("EAMSGD/EAMSGD.py", 2)])
def test_a_commit_sends_the_window_in_one_message_and_takes_theta_in_one(script, back):
    """The commit's session.run (the window's last local step, then the commit and the pull, or
    the elastic exchange), counted in the partition graphs TensorFlow ran: the worker sends the
    ps one message, Δᵢ, Σg or θᵢ packed. The ps sends θ packed, the new global step the run
    returns, and the go-ahead of the pull's ops on the worker; or, after an elastic exchange,
    the elastic force E packed and the global step. Unpacked, Δᵢ or E would be four messages;
    the constant T of the global step's increment, made on the worker, one more each way."""
    module, _, [worker] = in_process_cluster(script, 1, [])
    worker.initialize(chief=True)
    sent = sent_between_tasks(module.tf, worker.session, worker.built["local_step_and_commit"])
    to_ps = sent.pop(("/job:worker/task:0", "/job:ps/task:0"))
    to_worker = sent.pop(("/job:ps/task:0", "/job:worker/task:0"))
    assert len(to_ps) == 1 and "concat" in to_ps[0], to_ps
    assert len(to_worker) == back, to_worker
    assert set(sent) <= {("/job:worker/task:0", "/job:worker/task:0")}, sent  # the fetch


@pytest.mark.tf2
def test_hogwild_every_workers_step_lands_in_the_shared_theta():
    _, args, workers = in_process_cluster(HOGWILD, 2, [])
    workers[0].initialize(chief=True)
    theta = workers[0].theta()
    for step, worker in enumerate([workers[0], workers[1], workers[1], workers[0]]):
        global_step, gradients = worker.run("train_op", "train_op", "gradients")
        theta = [value - args.learning_rate * g for value, g in zip(theta, gradients)]
        assert_close(workers[1 - workers.index(worker)].theta(), theta)
        assert global_step == step + 1


def test_with_window_1_agn_and_downpour_easy_are_plain_asynchronous_sgd():
    """T = 1: Δ = (θᵢ − θ)/1 = −η·g, and Σg = g. One worker each, the same minibatches: the
    same losses as Hogwild's step for step (a local update racing the backward pass that still
    reads θᵢ would show here)."""
    flags = ["--learning_rate", "0.3"]
    trajectories = []
    for script, train_op, extra in [(HOGWILD, "train_op", []),
                                    (DOWNPOUR_EASY, "local_step_and_commit", ["--window", "1"]),
                                    (AGN, "local_step_and_commit", ["--window", "1"])]:
        _, _, [worker] = in_process_cluster(script, 1, flags + extra)
        worker.initialize(chief=True)
        trajectories.append([worker.run(train_op, "loss")[0] for _ in range(30)])
    np.testing.assert_allclose(trajectories[1], trajectories[0], rtol=1e-4)
    np.testing.assert_allclose(trajectories[2], trajectories[0], rtol=1e-4)


@pytest.mark.parametrize("script", WINDOWED)
def test_a_window_below_1_is_refused_in_one_line(script, capsys):
    module = load_example(script)
    with pytest.raises(SystemExit) as exit_info:
        module.parse_flags(["--window", "0"])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(error.strip().splitlines()) == 1 and "--window must be at least 1" in error
