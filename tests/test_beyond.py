"""AEASGD/, EAMSGD/, DynSGD/, Staleness-Aware-SGD/: the algorithms beyond the old guide.

Their lifecycle and accuracy on real local clusters, as for every example; then each update rule
against NumPy, on a real parameter server (servers in this process, on free ports), with values
chosen by the test.
"""
import os
import re

import numpy as np
import pytest

from helpers import (LocalCluster, example, free_ports, load_example, start_the_chief_last,
                     output, results_in, run_cluster, run_sh, worker_results)

SCRIPTS = {"AEASGD": "AEASGD/AEASGD.py", "EAMSGD": "EAMSGD/EAMSGD.py",
           "DynSGD": "DynSGD/DynSGD.py", "Staleness-Aware-SGD":
           "Staleness-Aware-SGD/Staleness-Aware-SGD.py"}
# What each prints beside its RESULT line: the numbers report() has no field for.
SUMMARY = {"AEASGD": r"(\d+) elastic exchanges", "EAMSGD": r"(\d+) elastic exchanges",
           "DynSGD": r"(\d+) commits, staleness s: mean ([\d.]+)",
           "Staleness-Aware-SGD": r"staleness τ of the (\d+) gradients: mean ([\d.]+)"}


# ---------------------------------------------------------------------------------------------
# Lifecycle and accuracy: bash run.sh with the defaults, a straggler (faults: test_reliability.py).
# ---------------------------------------------------------------------------------------------
@pytest.mark.tf2
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_run_sh_with_the_defaults_reaches_93_percent_and_every_process_exits_0(name):
    text = run_sh(SCRIPTS[name], cwd=os.path.dirname(example(SCRIPTS[name])))
    results = sorted(results_in(text), key=lambda result: result["task_index"])
    assert [r["task_index"] for r in results] == [0, 1], text
    ps, worker = ("localhost:%d" % port for port in free_ports(2))
    train_steps = load_example(SCRIPTS[name]).parse_flags(
        ["--ps_hosts", ps, "--worker_hosts", worker]).train_steps
    for result in results:
        assert result["algorithm"] == name and result["workers"] == 2
        assert result["test_accuracy"] >= 0.93, result
        assert result["global_step"] >= train_steps
    # The global step counts minibatch steps: the last worker to finish saw every one of them.
    assert max(r["global_step"] for r in results) == sum(r["local_steps"] for r in results)
    assert "[ps0] all 2 workers are done; exiting" in text
    assert len(re.findall(r"\[worker\d\] " + SUMMARY[name], text)) == 2, text


def test_a_dynsgd_straggler_s_commits_are_stale_and_counted_so():
    """With a 20 times longer --step_delay on worker1, worker0 commits many times while worker1
    computes one update: worker1's staleness, as the ps counts it, is high; worker0's stays low.
    worker0's own delay makes its 400 steps last 4 s at least, so that worker1, however slow to
    join on a busy machine, commits before the end (a CI run once saw worker0 make all 400
    commits, unhindered, before worker1's first)."""
    name = "DynSGD"
    cluster = LocalCluster(example(SCRIPTS[name]), workers=2, echo=False,
                           args=["--train_steps", "400"],
                           task_args={"worker0": ["--step_delay", "0.01"],
                                      "worker1": ["--step_delay", "0.2"]})
    try:
        start_the_chief_last(cluster)
        assert cluster.wait(120), output(cluster)
    finally:
        cluster.stop()
    assert set(cluster.returncodes().values()) == {0}, output(cluster)
    count, mean = {}, {}
    for worker in ("worker0", "worker1"):
        found = re.search(SUMMARY[name], output(cluster, worker))
        assert found, output(cluster, worker)
        count[worker], mean[worker] = int(found.group(1)), float(found.group(2))
    assert count["worker0"] > 3 * count["worker1"] > 0, count
    assert mean["worker1"] > 2 and mean["worker0"] < 1, mean


# ---------------------------------------------------------------------------------------------
# Flags and placement, without servers.
# ---------------------------------------------------------------------------------------------
BAD_FLAGS = [("AEASGD", ["--window", "0"], "--window"),
             ("AEASGD", ["--rho", "0"], "--rho"),
             ("AEASGD", ["--rho", "-1"], "--rho"),
             ("AEASGD", ["--learning_rate", "0.5", "--rho", "2"], "must be below 1"),  # α = 1
             ("EAMSGD", ["--window", "-3"], "--window"),
             ("EAMSGD", ["--momentum", "1"], "--momentum"),
             ("EAMSGD", ["--momentum", "-0.1"], "--momentum"),
             ("DynSGD", ["--window", "0"], "--window")]


@pytest.mark.parametrize("name, argv, expected", BAD_FLAGS)
def test_bad_algorithm_flags_get_one_line_and_exit_2(name, argv, expected, capsys):
    module = load_example(SCRIPTS[name])
    ps, worker = ("localhost:%d" % port for port in free_ports(2))
    with pytest.raises(SystemExit) as exit_info:
        module.parse_flags(argv + ["--ps_hosts", ps, "--worker_hosts", worker])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(error.strip().splitlines()) == 1 and expected in error, error


@pytest.mark.tf2
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_theta_and_the_centre_live_on_the_ps_and_gradients_run_on_the_worker(name):
    module = load_example(SCRIPTS[name])
    tf = module.tf
    ps, worker0, worker1 = ("localhost:%d" % port for port in free_ports(3))
    args = module.parse_flags(["--job_name", "worker", "--task_index", "1", "--ps_hosts", ps,
                               "--worker_hosts", "%s,%s" % (worker0, worker1)])
    with tf.Graph().as_default() as graph:
        built = module.build_graph(args)
        shared, local = tf.global_variables(), tf.local_variables()
        assert {v.op.name for v in shared} >= {"hidden_weights", "hidden_biases",
                                               "output_weights", "output_biases", "global_step"}
        assert all(v.device == "/job:ps/task:0" for v in shared), [v.device for v in shared]
        assert all(v.device == "/job:worker/task:1" for v in local), [v.device for v in local]
        assert bool(local) == (name != "Staleness-Aware-SGD")  # which keeps no θᵢ
        operations = graph.get_operations()
        gradients = [op for op in operations if op.name.startswith("gradients")]
        assert gradients and all(op.device == "/job:worker/task:1" for op in gradients)
        assert built["loss"].device == "/job:worker/task:1"
        # Every write to θ, x̃ or a counter, and the lock around it, runs on the ps.
        shared_names = {v.op.name for v in shared}
        writes = [op for op in operations if op.type in ("Assign", "AssignAdd", "AssignSub")
                  and op.inputs[0].op.name in shared_names
                  and not op.name.endswith("/Assign")]  # not the initializers
        assert writes and all(op.device == "/job:ps/task:0" for op in writes), [
            (op.name, op.device) for op in writes]
        locks = [op for op in operations if op.type == "MutexLock"]
        assert locks and all(op.device == "/job:ps/task:0" for op in locks)


# ---------------------------------------------------------------------------------------------
# The update rules on a real ps: servers in this process, values set by the test.
# ---------------------------------------------------------------------------------------------
def in_process_cluster(module, workers, extra_flags=()):
    """Flags for each worker, then a ps and the workers' servers in this process."""
    tf = module.tf
    ports = free_ports(1 + workers)
    cluster = ["--ps_hosts", "localhost:%d" % ports[0], "--worker_hosts",
               ",".join("localhost:%d" % port for port in ports[1:])]
    flags = [module.parse_flags(["--job_name", "worker", "--task_index", str(index)] + cluster
                                + list(extra_flags)) for index in range(workers)]
    spec = tf.train.ClusterSpec(flags[0].cluster)
    tf.train.Server(spec, job_name="ps", task_index=0)
    servers = [tf.train.Server(spec, job_name="worker", task_index=index)
               for index in range(workers)]
    return flags, servers


class Worker:
    """One worker's graph and session, the script's own build_graph()."""

    def __init__(self, module, args, server):
        self.tf = module.tf
        self.graph = self.tf.Graph()
        with self.graph.as_default():
            self.ops = module.build_graph(args)
            self.init_global = self.tf.global_variables_initializer()
            self.init_local = self.tf.local_variables_initializer()
        self.session = self.tf.Session(server.target, graph=self.graph,
                                       config=module.session_config(args))

    def initialize(self, chief):
        if chief:
            self.session.run(self.init_global)
        self.session.run(self.init_local)

    def run(self, fetches, feed_dict=None):
        return self.session.run(fetches, feed_dict)

    def values(self, variables):
        return self.session.run(variables)

    def load(self, variables, values):
        for variable, value in zip(variables, values):
            variable.load(value, self.session)


def random_like(variables, seed):
    rng = np.random.RandomState(seed)
    return [rng.normal(size=[int(size) for size in v.shape]).astype(np.float32)
            for v in variables]


def assert_close(actual, expected):
    """float32 against NumPy. The tests' θ and updates are N(0, 1) draws, so an entry of a
    result near 0 can be the difference of terms near 3, each rounded to ~2.4e-7 (TF 2.21 on an
    AMD EPYC was 1.09e-6 off in one entry of 8192, against NumPy, in DynSGD's exact test):
    atol 1e-5 bounds that; a wrong rule is off by a share of an update, 1e-2 and more."""
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["AEASGD", "EAMSGD"])
def test_the_elastic_lock_is_taken_once_theta_i_is_on_the_ps(name):
    """θᵢ crosses to the ps as one message before the exchange takes its lock, so that the lock
    is never held while a tensor is on the network: no op under the lock takes an input from a
    worker, and the lock waits for the packed θᵢ on the ps."""
    from test_asynchronous import cluster_flags, worker_args
    module = load_example(SCRIPTS[name])
    args = worker_args(module, cluster_flags(2), 1)
    with module.tf.Graph().as_default() as graph:
        module.build_graph(args)
    under_the_lock = [op for op in graph.get_operations()
                      if "critical_section_execute/" in op.name]
    assert under_the_lock
    from_a_worker = [(op.name, tensor.name) for op in under_the_lock for tensor in op.inputs
                     if tensor.op.device.startswith("/job:worker")]
    assert from_a_worker == []
    [lock] = [op for op in under_the_lock if op.type == "MutexLock"]
    arrived = [op for op in lock.control_inputs if op.device == "/job:ps/task:0"
               and op.type == "Reshape"]
    assert len(arrived) == 4, lock.control_inputs  # θᵢ's four tensors, cut on the ps ...
    crossing, seen = set(), list(arrived)
    while seen:
        op = seen.pop()
        for tensor in op.inputs:
            if tensor.op.device.startswith("/job:worker"):
                crossing.add(tensor.op)
            elif tensor.op.type != "Const":
                seen.append(tensor.op)
    assert [op.type for op in crossing] == ["ConcatV2"], crossing  # ... from one message


@pytest.mark.parametrize("name", ["DynSGD", "Staleness-Aware-SGD"])
def test_the_update_lock_is_taken_once_what_it_applies_is_on_the_ps(name):
    """As for the elastic lock: no op under either lock (the pull, the update) takes an input
    from a worker (DynSGD's counter_pulled was read from it), and the update's lock waits for
    what it applies, cut on the ps from one message (Δ, or the gradient)."""
    from test_asynchronous import cluster_flags, worker_args
    module = load_example(SCRIPTS[name])
    args = worker_args(module, cluster_flags(2), 1,
                       ["--window", "5"] if name == "DynSGD" else [])
    with module.tf.Graph().as_default() as graph:
        module.build_graph(args)
    under_a_lock = [op for op in graph.get_operations() if "critical_section_execute" in op.name]
    assert [(op.name, tensor.name) for op in under_a_lock for tensor in op.inputs
            if tensor.op.device.startswith("/job:worker")] == []
    waits = [[op.type for op in lock.control_inputs]
             for lock in under_a_lock if lock.type == "MutexLock"]
    # The pull's lock waits for no tensor, the update's for the four it applies.
    assert sorted(wait.count("Reshape") for wait in waits) == [0, 4], waits


@pytest.mark.tf2
@pytest.mark.parametrize("name", ["AEASGD", "EAMSGD"])
def test_an_elastic_exchange_moves_worker_and_centre_by_alpha_times_their_distance(name):
    """The window's last local step and the exchange, one session.run, on a minibatch set by the
    test: the force is computed from θᵢ after that step (recomputed in NumPy); it moves θᵢ and
    x̃ by the same amount, in opposite directions; EAMSGD's velocity takes no part."""
    module = load_example(SCRIPTS[name])
    flags, servers = in_process_cluster(module, 2, ["--window", "3"])
    first, second = (Worker(module, args, server) for args, server in zip(flags, servers))
    first.initialize(chief=True)
    second.initialize(chief=False)
    assert_close(first.values(first.ops["local"]), first.values(first.ops["centre"]))
    centre = random_like(first.ops["centre"], seed=1)
    first.load(first.ops["centre"], centre)
    first.load([first.ops["global_step"]], [10])
    eta, alpha = flags[0].learning_rate, flags[0].learning_rate * flags[0].rho
    # Worker 0, then worker 1 (which sees the centre worker 0 has moved), one exchange each.
    for seed, worker in enumerate((first, second), 2):
        theta = [0.1 * value for value in random_like(worker.ops["local"], seed)]
        worker.load(worker.ops["local"], theta)
        images, labels = random_minibatch(seed)
        if name == "EAMSGD":
            velocity = [0.01 * value for value in random_like(worker.ops["velocity"], 10 + seed)]
            worker.load(worker.ops["velocity"], velocity)
            theta, velocity = nesterov(theta, velocity, images, labels, eta,
                                       flags[0].momentum)
        else:
            theta = [t - eta * g for t, g in zip(theta, mlp_gradients(theta, images, labels))]
        global_step = worker.run(worker.ops["local_step_and_commit"],
                                 {worker.ops["images"]: images, worker.ops["labels"]: labels})
        force = [alpha * (t - x) for t, x in zip(theta, centre)]
        centre = [x + e for x, e in zip(centre, force)]
        assert_close(worker.values(worker.ops["local"]), [t - e for t, e in zip(theta, force)])
        assert_close(worker.values(worker.ops["centre"]), centre)
        if name == "EAMSGD":
            assert_close(worker.values(worker.ops["velocity"]), velocity)
    assert global_step == 10 + 2 * 3, "each exchange counts the window's τ local steps"
    assert first.values(first.ops["global_step"]) == 10 + 2 * 3


def random_minibatch(seed, size=8):
    """Images and labels of the digits' shape (8 × 8 pixels in [0, 1], 10 classes)."""
    rng = np.random.RandomState(seed)
    return rng.uniform(size=(size, 64)).astype(np.float32), rng.randint(10, size=size)


def mlp_gradients(params, images, labels):
    """∂ cross-entropy / ∂ params of the examples' model, in NumPy."""
    hidden_weights, hidden_biases, output_weights, output_biases = params
    hidden = np.maximum(images @ hidden_weights + hidden_biases, 0)
    scores = hidden @ output_weights + output_biases
    probabilities = np.exp(scores - scores.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    d_scores = (probabilities - np.eye(scores.shape[1])[labels]) / len(labels)
    d_hidden = d_scores @ output_weights.T * (hidden > 0)
    return [images.T @ d_hidden, d_hidden.sum(axis=0), hidden.T @ d_scores, d_scores.sum(axis=0)]


def nesterov(theta, velocity, images, labels, eta, delta):
    """EAMSGD's local step in NumPy: the gradient at θᵢ + δ·v, v ← δ·v − η·g, θᵢ ← θᵢ + v.
    Returns (θᵢ, v) after it."""
    look_ahead = [t + delta * v for t, v in zip(theta, velocity)]
    velocity = [delta * v - eta * g
                for v, g in zip(velocity, mlp_gradients(look_ahead, images, labels))]
    return [t + v for t, v in zip(theta, velocity)], velocity


@pytest.mark.tf2
def test_an_eamsgd_local_step_is_nesterov_momentum():
    module = load_example(SCRIPTS["EAMSGD"])
    [args], [server] = in_process_cluster(module, 1)
    worker = Worker(module, args, server)
    worker.initialize(chief=True)
    theta = [0.1 * value for value in random_like(worker.ops["local"], seed=1)]
    velocity = [0.01 * value for value in random_like(worker.ops["velocity"], seed=2)]
    worker.load(worker.ops["local"], theta)
    worker.load(worker.ops["velocity"], velocity)
    images, labels = random_minibatch(3)
    worker.run(worker.ops["local_step"], {worker.ops["images"]: images,
                                          worker.ops["labels"]: labels})
    theta, velocity = nesterov(theta, velocity, images, labels, args.learning_rate,
                               args.momentum)
    assert_close(worker.values(worker.ops["velocity"]), velocity)
    assert_close(worker.values(worker.ops["local"]), theta)
    assert worker.values(worker.ops["global_step"]) == 0, "a local step does not talk to the ps"


@pytest.mark.tf2
@pytest.mark.parametrize("staleness", [0, 1, 3])
def test_a_dynsgd_commit_is_divided_by_its_staleness_plus_one(staleness):
    """Worker 0 pulls; worker 1 commits `staleness` times; then worker 0 commits Δ: the ps
    applies Δ / (staleness + 1), and worker 0 is back in step with θ. Each commit is a window's
    last local step and the commit, one session.run, from θᵢ and a minibatch set by the test:
    Δ = θᵢ − η·g(θᵢ) − θ_pulled (g recomputed in NumPy)."""
    module = load_example(SCRIPTS["DynSGD"])
    flags, servers = in_process_cluster(module, 2, ["--window", "2"])
    first, second = (Worker(module, args, server) for args, server in zip(flags, servers))
    first.initialize(chief=True)
    second.initialize(chief=False)
    theta = random_like(first.ops["params"], seed=1)
    first.load(first.ops["params"], theta)
    first.run(first.ops["local_init_op"])
    second.run(second.ops["local_init_op"])

    def last_step_and_commit(worker, theta_i, seed):
        """θᵢ set, then one run of local_step_and_commit: (global step, s, θᵢ after the step)."""
        worker.load(worker.ops["local"], theta_i)
        images, labels = random_minibatch(seed)
        stepped = [t - flags[0].learning_rate * g
                   for t, g in zip(theta_i, mlp_gradients(theta_i, images, labels))]
        global_step, seen = worker.run(
            (worker.ops["local_step_and_commit"], worker.ops["staleness"]),
            {worker.ops["images"]: images, worker.ops["labels"]: labels})
        return global_step, seen, stepped

    for commit in range(staleness):
        update = random_like(theta, seed=10 + commit)
        global_step, seen, stepped = last_step_and_commit(
            second, [t + u for t, u in zip(theta, update)], seed=20 + commit)
        assert seen == 0, "worker 1 pulled again with each commit"
        theta = stepped  # θ + Δ / 1, Δ = stepped − θ
        assert_close(second.values(second.ops["params"]), theta)
    pulled = first.values(first.ops["local"])
    update = random_like(theta, seed=2)
    global_step, seen, stepped = last_step_and_commit(
        first, [p + u for p, u in zip(pulled, update)], seed=3)
    theta = [t + (s - p) / (staleness + 1) for t, s, p in zip(theta, stepped, pulled)]
    assert seen == staleness
    assert_close(first.values(first.ops["params"]), theta)
    assert_close(first.values(first.ops["local"]), theta)
    assert first.values(first.ops["update_counter"]) == staleness + 1
    assert global_step == 2 * (staleness + 1), "each commit counts the window's T local steps"


@pytest.mark.tf2
@pytest.mark.parametrize("staleness", [0, 1, 2, 5])
def test_a_stale_gradient_is_applied_with_the_rate_divided_by_its_staleness(staleness):
    """A gradient computed at step k and applied at step k + τ: θ ← θ − η / max(τ, 1)·g."""
    module = load_example(SCRIPTS["Staleness-Aware-SGD"])
    [args], [server] = in_process_cluster(module, 1)
    worker = Worker(module, args, server)
    worker.initialize(chief=True)
    global_step, seen = worker.run((worker.ops["train_op"], worker.ops["staleness"]))
    assert (global_step, seen) == (1, 0), "alone, a worker's gradients are never stale"
    theta = random_like(worker.ops["params"], seed=1)
    gradients = random_like(worker.ops["params"], seed=2)
    worker.load(worker.ops["params"], theta)
    worker.load([worker.ops["global_step"]], [7 + staleness])
    feed = dict(zip(worker.ops["gradients"], gradients))
    feed[worker.ops["computed_at"]] = 7
    global_step, seen = worker.run((worker.ops["train_op"], worker.ops["staleness"]), feed)
    assert (global_step, seen) == (7 + staleness + 1, staleness)
    rate = args.learning_rate / max(staleness, 1)
    assert_close(worker.values(worker.ops["params"]),
                 [t - rate * g for t, g in zip(theta, gradients)])


def test_on_three_ps_tasks_the_critical_sections_count_every_update_and_every_ps_exits_0():
    """Staleness-Aware-SGD, two workers, θ and the global step spread over three ps tasks
    (replica_device_setter's round robin; the lock on ps 0): the locked update counts every
    worker's step exactly once (the global step is the sum of the local steps), training
    reaches the accuracy of a short run, and each ps task hears that both workers are done and
    exits 0 by itself."""
    cluster = run_cluster(SCRIPTS["Staleness-Aware-SGD"], ps=3, args=["--train_steps", "600"])
    results = worker_results(cluster)
    text = output(cluster)
    assert max(r["global_step"] for r in results) == sum(r["local_steps"] for r in results)
    assert all(r["test_accuracy"] >= 0.9 for r in results), results
    for ps in range(3):
        assert "[ps%d] all 2 workers are done; exiting" % ps in text, text
