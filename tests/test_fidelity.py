"""Fidelity across the examples: where every op runs, which updates are lock-free and which run
in a critical section (under real concurrency), and what backup workers really average.

Placement and lock attributes are read off each script's own graph (build_graph, in this
process): cheap, and they fail for a forward pass pinned to the ps, a worker put on the CPU, or
a lock taken where the paper takes none. The critical sections and the backup workers are
exercised on real servers in this process (free localhost ports), several workers at once, and
every update is recomputed with NumPy.
"""
import concurrent.futures
import json
import os
import re
import sys

import numpy as np
import pytest

from helpers import ROOT, example, has_parameter_servers, load_example, run_script
from test_asynchronous import cluster_flags
from test_synchronous import SHARD, gradient, shards_and_initial_parameters

import shared_helpers

# Every example with a ps, present and future (AllReduce-SGD, which has none, pins its own
# placement in test_allreduce.py).
SCRIPTS = [os.path.relpath(path, ROOT) for path in shared_helpers.example_scripts()
           if "def example_parser" in open(path).read()
           and has_parameter_servers(path)]
MULTI_GPU = "Multiple-GPUs-Single-Machine/dist_mult_gpu_sing_mach.py"
SSGD = "Synchronous-SGD/ssgd.py"
RATES = "Synchronous-SGD-different-learning-rates/ssgd.py"
SAGN = "SAGN/SAGN.py"
DYNSGD = "DynSGD/DynSGD.py"
SASGD = "Staleness-Aware-SGD/Staleness-Aware-SGD.py"
PARAMS = ["hidden_weights", "hidden_biases", "output_weights", "output_biases"]
# The kernels of the forward and backward passes (and of the test-set evaluation).
COMPUTE = {"MatMul", "Relu", "ReluGrad", "SparseSoftmaxCrossEntropyWithLogits", "BiasAdd",
           "ArgMax"}
WRITES = ("Apply", "ResourceApply", "Assign", "Scatter")
PS = "/job:ps/task:0"


def worker_flags(module, cluster, task_index, extra=()):
    return module.parse_flags(["--job_name", "worker", "--task_index", str(task_index)]
                              + cluster + list(extra))


def build(script, extra=(), gpu=False, ps=1):
    """Worker 1's graph (of two workers and `ps` ps tasks): (module, graph, built). gpu: as if
    one were visible."""
    module = load_example(script)
    if gpu:
        module.visible_gpus = lambda: [type("FakeGPU", (), {"name": "/physical_device:GPU:0"})]
    args = worker_flags(module, cluster_flags(2, ps), 1, extra)
    graph = module.tf.Graph()
    with graph.as_default():
        built = module.build_graph(args)
        if "optimizer" in built:  # the synchronous family: used by its session hook
            built["optimizer"].ready_for_local_init_op.mark_used()
    return module, graph, built


def written_variable(op):
    """The variable op that `op` writes, or None."""
    if not (op.type.startswith(WRITES) and op.inputs):
        return None
    source = op.inputs[0].op
    return source if source.type in ("VariableV2", "VarHandleOp") else None


# ---------------------------------------------------------------------------------------------
# Placement: the passes on the worker, θ and its update on the ps, local state local.
# ---------------------------------------------------------------------------------------------
@pytest.mark.tf2
@pytest.mark.parametrize("script, gpu", [(script, False) for script in SCRIPTS]
                         + [(MULTI_GPU, True)])
def test_every_op_runs_where_the_algorithm_puts_it(script, gpu):
    """Worker 1's graph: every forward and backward kernel on worker 1 (on its GPU when it has
    one), every global variable on the ps and every write to it there, every local variable
    (θᵢ, slots, the values at the last pull) and every write to it on worker 1, and the
    synchronous accumulators and token queue on the ps."""
    module, graph, built = build(script, gpu=gpu)
    worker = "/job:worker/task:1"
    # The multi-GPU example names the worker's device: its GPU, or the CPU where none is visible.
    compute_device = worker + ("/device:GPU:0" if gpu else "/device:CPU:0" if script == MULTI_GPU
                               else "")
    ps_device = PS + ("/device:CPU:0" if script == MULTI_GPU else "")
    operations = graph.get_operations()
    with graph.as_default():
        shared, local = module.tf.global_variables(), module.tf.local_variables()
    assert {v.op.name for v in shared} >= set(PARAMS) | {"global_step"}
    assert all(v.device == ps_device for v in shared), [(v.op.name, v.device) for v in shared]
    assert all(v.device == worker for v in local), [(v.op.name, v.device) for v in local]
    compute = [op for op in operations if op.type in COMPUTE or op.name.startswith("gradients")]
    assert sum(op.type == "MatMul" for op in compute) >= 4  # two layers, forward and backward
    assert sum(op.type == "ReluGrad" for op in compute) >= 1
    misplaced = [(op.name, op.device) for op in compute if op.device != compute_device]
    assert not misplaced, misplaced
    assert built["loss"].device == compute_device
    # Every write lands where its variable lives: θ's updates on the ps, θᵢ's on the worker.
    writes = [(op, written_variable(op)) for op in operations if written_variable(op)]
    shared_names = {v.op.name for v in shared}
    assert {variable.name for _, variable in writes} >= set(PARAMS)
    misplaced = [(op.name, op.device) for op, variable in writes
                 if op.device != (ps_device if variable.name in shared_names else worker)]
    assert not misplaced, misplaced
    updates_of_theta = [op for op, variable in writes if variable.name in PARAMS
                        and not op.name.startswith(variable.name + "/")]  # not initializers
    assert updates_of_theta, "θ is updated in this graph"
    # The synchronous family's accumulators and token queue live on the ps.
    synchronous = [op for op in operations if "Accumulator" in op.type or "Queue" in op.type]
    # (TensorFlow 2.x pins the token queue to "/job:ps/task:0/device:CPU:*": still the ps.)
    assert all(op.device.startswith(ps_device) for op in synchronous), [
        (op.name, op.device) for op in synchronous if not op.device.startswith(ps_device)]
    if "optimizer" in built:
        assert sum("AccumulatorApplyGradient" in op.type for op in synchronous) == 4


def gpu_available():
    import tensorflow.compat.v1 as tf
    return tf.test.is_gpu_available()


@pytest.mark.skipif("not gpu_available()",
                    reason="no GPU visible to TensorFlow here: the GPU placement run needs one")
def test_with_a_gpu_the_passes_run_on_it_and_the_update_on_the_ps():
    """On a machine with a GPU: one traced step of the real script, on real servers, ran its
    matrix products on worker 0's GPU and θ's update on the ps's CPU."""
    code, text = run_script(["bash", example(
        "Multiple-GPUs-Single-Machine/dist_mult_gpu_sing_mach.sh"), "--train_steps", "50"],
        env={"PYTHON": sys.executable, "GPUS": "1", "WORKERS": "1"})
    assert code == 0, text
    line = re.search(r"^\[worker0\] devices used by one step: (.*)$", text, re.M)
    assert line, text
    devices = json.loads(line.group(1))
    assert devices["MatMul"] == ["/job:worker/replica:0/task:0/device:GPU:0"], devices
    assert devices["ApplyGradientDescent"] == ["/job:ps/replica:0/task:0/device:CPU:0"], devices


# ---------------------------------------------------------------------------------------------
# Locks: lock-free where the paper says so, a critical section where it says so.
# ---------------------------------------------------------------------------------------------
def theta_updates(graph):
    return [op for op in graph.get_operations() if op.type == "ApplyGradientDescent"
            and written_variable(op) is not None and written_variable(op).name in PARAMS]


@pytest.mark.tf2
@pytest.mark.parametrize("script, extra, locked", [
    ("Hogwild/Hogwild.py", [], False), ("Hogwild/Hogwild.py", ["--use_locking"], True),
    (MULTI_GPU, [], False)])
def test_theta_s_update_takes_a_lock_only_with_use_locking(script, extra, locked):
    """Hogwild (and the multi-GPU example, Hogwild on one machine): θ ← θ − η·g without a lock,
    so that updates may interleave; --use_locking is the contrast."""
    _, graph, _ = build(script, extra)
    updates = theta_updates(graph)
    assert len(updates) == 4, [op.name for op in updates]
    assert all(op.get_attr("use_locking") == locked for op in updates), [
        op.node_def for op in updates]


def ancestors(op):
    """Every op `op` depends on, through data and control edges."""
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        for parent in [t.op for t in current.inputs] + list(current.control_inputs):
            if parent.name not in seen:
                seen.add(parent.name)
                stack.append(parent)
    return seen


@pytest.mark.tf2
@pytest.mark.parametrize("ps", [1, 3])
@pytest.mark.parametrize("script, copies", [(DYNSGD, 12), (SASGD, 7)])
def test_every_read_sent_to_a_worker_and_every_write_is_in_the_critical_section(
        script, copies, ps):
    """DynSGD and Staleness-Aware SGD: the pull (θ with its counter or step) and the update are
    each one critical section on the ps, and what leaves it is a copy (DeepCopy), not an alias of
    a variable that the next update changes. Each variable is copied on its own task: with θ,
    the global step and the counter spread over three ps tasks, an op under the lock that read a
    variable of another task (the pack, or τ's subtraction) would take the value that task sent
    when its step began, before the lock."""
    _, graph, _ = build(script, ps=ps)
    operations = graph.get_operations()
    locks = {op.name for op in operations if op.type == "MutexLock"}
    assert len(locks) == 2, "one critical section for the pull, one for the update"
    deep_copies = [op for op in operations if op.type == "DeepCopy"]
    assert len(deep_copies) == copies, [op.name for op in deep_copies]
    for op in deep_copies:
        assert op.device.startswith("/job:ps") and locks & ancestors(op), op.name
    assert {op.device for op in deep_copies} == {"/job:ps/task:%d" % i for i in range(ps)}
    variables = {op.name: op.device for op in operations if op.type == "VariableV2"}
    under_a_lock = [op for op in operations if locks & ancestors(op)]
    across = [(op.name, tensor.op.name) for op in under_a_lock for tensor in op.inputs
              if tensor.op.name in variables and variables[tensor.op.name] != op.device]
    assert not across, across
    writes = [op for op in operations if written_variable(op) is not None
              and op.device.startswith("/job:ps")
              and not op.name.startswith(written_variable(op).name + "/")]  # initializers
    assert len(writes) >= 5 and all(locks & ancestors(op) for op in writes), [
        op.name for op in writes if not locks & ancestors(op)]


# ---------------------------------------------------------------------------------------------
# The critical sections under concurrency: three workers at once, every step replayed in NumPy.
# ---------------------------------------------------------------------------------------------
SERVERS = []  # tf.train.Server cannot be stopped in TensorFlow 1.x; they live until pytest ends


def in_process_workers(script, workers, extra=()):
    """A ps and `workers` servers in this process, each worker's own graph and session."""
    module = load_example(script)
    tf, cluster = module.tf, cluster_flags(workers)
    flags = [worker_flags(module, cluster, index, list(extra) + ["--timeout", "20"])
             for index in range(workers)]
    spec = tf.train.ClusterSpec(flags[0].cluster)
    SERVERS.append(tf.train.Server(spec, job_name="ps", task_index=0))
    sessions = []
    for index, args in enumerate(flags):
        server = tf.train.Server(spec, job_name="worker", task_index=index,
                                 config=module.session_config(args))
        SERVERS.append(server)
        graph = tf.Graph()
        with graph.as_default():
            built = module.build_graph(args)
            if "optimizer" in built:
                built["optimizer"].ready_for_local_init_op.mark_used()
            built["init_global"] = tf.global_variables_initializer()
            built["init_local"] = tf.local_variables_initializer()
        sessions.append((tf.Session(server.target, graph=graph,
                                    config=module.session_config(args)), graph, built))
    return module, flags, sessions


def run_concurrently(functions):
    with concurrent.futures.ThreadPoolExecutor(len(functions)) as pool:
        return [future.result(timeout=120) for future in [pool.submit(f) for f in functions]]


def test_staleness_aware_pulls_and_updates_are_atomic_under_concurrency():
    """Three workers step at once (the gradients are fed: random, the test knows them). Sorted by
    the global step each update returned, the updates must replay exactly in NumPy:
    θ_j = θ_{j−1} − η/max(τ_j, 1)·g_j with τ_j = j − 1 − k_j, where k_j is the step the pull
    returned, and the θ pulled with k_j must be exactly θ_{k_j}. A pull outside the lock, or a
    read that aliases a variable, pairs a θ with the wrong step; τ > 1 occurs."""
    workers, steps = 3, 100
    module, flags, sessions = in_process_workers(SASGD, workers)
    eta = np.float32(flags[0].learning_rate)
    chief = sessions[0]
    chief[0].run(chief[2]["init_global"])
    theta0 = chief[0].run(chief[2]["params"])
    shapes = [value.shape for value in theta0]
    records = []

    def worker(index):
        session, graph, built = sessions[index]
        rng = np.random.RandomState(index)
        fetches = [(built["train_op"], built["staleness"]), built["computed_at"],
                   theta_message(graph, built)]
        mine = []
        for _ in range(steps):
            gradients = [rng.normal(scale=0.05, size=shape).astype(np.float32)
                         for shape in shapes]
            (after, staleness), computed_at, pulled = session.run(
                fetches, dict(zip(built["gradients"], gradients)))
            mine.append((int(after), int(staleness), int(computed_at), pulled, gradients))
        records.extend(mine)

    run_concurrently([lambda i=i: worker(i) for i in range(workers)])
    records.sort(key=lambda record: record[0])
    assert [r[0] for r in records] == list(range(1, workers * steps + 1))
    thetas = [[value.copy() for value in theta0]]
    for step, staleness, computed_at, pulled, gradients in records:
        assert staleness == step - 1 - computed_at >= 0, (step, staleness, computed_at)
        np.testing.assert_array_equal(pulled, np.concatenate(
            [value.ravel() for value in thetas[computed_at]]), "θ pulled at step %d" % computed_at)
        rate = eta / np.float32(max(staleness, 1))
        thetas.append([value - rate * g for value, g in zip(thetas[-1], gradients)])
    final = chief[0].run(chief[2]["params"])
    for got, want in zip(final, thetas[-1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert max(r[1] for r in records) > 1, "τ > 1 must occur with three workers"


def theta_message(graph, built):
    """The packed θ that the pull sends to the worker (the input of its unpack)."""
    return [op for op in graph.get_operations() if op.type == "SplitV"
            and op.device.startswith("/job:worker")][0].inputs[0]


def test_dynsgd_commits_and_pulls_are_atomic_under_concurrency():
    """Three workers commit at once (each Δ fed: random, the test knows it). Sorted by the
    global step each commit returned, the commits must replay exactly in NumPy:
    θ_c = θ_{c−1} + Δ_c/(s_c + 1), s_c = c − 1 − counter_pulled, and the θ each worker pulled
    back with counter c must be exactly θ_c."""
    workers, commits, window = 3, 60, 2
    module, flags, sessions = in_process_workers(DYNSGD, workers, ["--window", str(window)])
    chief = sessions[0]
    chief[0].run(chief[2]["init_global"])
    for session, _, built in sessions:
        session.run(built["local_init_op"])
    theta0 = chief[0].run(chief[2]["params"])
    shapes = [value.shape for value in theta0]
    size = sum(value.size for value in theta0)
    records = []

    def worker(index):
        session, graph, built = sessions[index]
        message = [op for op in graph.get_operations() if op.type == "SplitV"
                   and op.device.startswith("/job:ps")][0].inputs[0]  # Δ, packed
        pulled_counter = [v for v in graph.get_collection("local_variables")
                          if v.op.name == "pulled/update_counter"][0]
        pulled_params = [v for v in graph.get_collection("local_variables")
                         if v.op.name.startswith("pulled/") and v.op.name != pulled_counter.op.name]
        rng = np.random.RandomState(index)
        mine = []
        for _ in range(commits):
            before = int(session.run(pulled_counter))
            delta = rng.normal(scale=0.05, size=size).astype(np.float32)
            # The window's last local step and the commit; with Δ fed, only the commit runs.
            after, staleness = session.run(
                [built["local_step_and_commit"], built["staleness"]], {message: delta})
            counter, pulled, local = session.run([pulled_counter, pulled_params, built["local"]])
            mine.append((int(after), int(staleness), before, delta, int(counter), pulled, local))
        records.extend(mine)

    run_concurrently([lambda i=i: worker(i) for i in range(workers)])
    records.sort(key=lambda record: record[0])
    assert [r[0] for r in records] == [window * c for c in range(1, workers * commits + 1)]
    thetas = [[value.copy() for value in theta0]]
    for c, (_, staleness, before, delta, counter, pulled, local) in enumerate(records, 1):
        assert staleness == c - 1 - before >= 0, (c, staleness, before)
        pieces = np.split(delta, np.cumsum([int(np.prod(s)) for s in shapes])[:-1])
        scale = np.float32(1.0) / np.float32(staleness + 1)
        thetas.append([value + scale * piece.reshape(shape)
                       for value, piece, shape in zip(thetas[-1], pieces, shapes)])
        assert counter == c, "the pull after a commit reads the counter that commit left"
        for got, mine, want in zip(pulled, local, thetas[c]):
            np.testing.assert_array_equal(got, mine)  # θᵢ ← θ, θ_pulled ← θ: the same pull
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    final = chief[0].run(chief[2]["params"])
    for got, want in zip(final, thetas[-1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert max(r[1] for r in records) > 1, "s > 1 must occur with three workers"


# ---------------------------------------------------------------------------------------------
# Backup workers (M = 3, N = 2), step by step: what TensorFlow's SyncReplicasOptimizer averages.
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("script, rates, extra", [
    (SSGD, [0.5] * 3, ["--learning_rate", "0.5"]),
    (RATES, [0.9, 0.3, 0.05], ["--learning_rates", "0.9,0.3,0.05"]),
    (SAGN, [0.5] * 3, ["--learning_rate", "0.5", "--window", "1"])])
def test_backup_workers_average_the_first_n_fresh_gradients_whoever_sent_them(script, rates,
                                                                              extra):
    """Three workers, N = 2, full-shard batches (each gradient is gᵢ(θ), recomputed in NumPy),
    the steps ordered by the test. Update 1: workers 0 and 1, the mean of their gradients.
    Then worker 0 steps twice before anyone else (the update left a third token): update 2 is
    −ηg₀(θ₁) alone, worker 0 supplied both of the N (TensorFlow's behaviour; Chen et al. 2016
    take the first N from distinct workers). The straggler's gradient, tagged with an older
    step, is dropped, not counted; once it has a current token its gradient counts again."""
    _, shards, initial = shards_and_initial_parameters(script, 3)
    module, flags, sessions = in_process_workers(script, 3, extra + [
        "--replicas_to_aggregate", "2", "--batch_size", str(SHARD), "--timeout", "10"])
    tf = module.tf
    chief_session, chief_graph, chief = sessions[0]
    with chief_graph.as_default():
        optimizer = chief["optimizer"]
        with tf.control_dependencies(optimizer.get_chief_queue_runner().enqueue_ops):
            aggregate = chief["global_step"].read_value()
        accumulated = [accumulator.num_accumulated()
                       for accumulator, _ in optimizer._accumulator_list]
    chief_session.run([chief["init_global"], chief["init_local"]])
    chief_session.run(optimizer.chief_init_op)
    for session, _, built in sessions[1:]:
        session.run(built["init_local"])
        session.run(built["optimizer"].local_step_init_op)

    def step(index):
        """One synchronous step of worker `index`: send its contribution, take a token."""
        session, _, built = sessions[index]
        if script == SAGN:
            session.run(built["pull"])
            session.run(built["local_step"])
            return session.run(built["commit"])
        return session.run(built["train_op"])

    def theta():
        return [value.astype(np.float64) for value in chief_session.run(
            [v for v in chief_graph.get_collection("variables") if v.op.name in PARAMS])]

    def expected(before, contributors):
        parts = [[rates[i] * g for g in gradient(before, *shards[i])] for i in contributors]
        return [value - np.mean(p, axis=0) for value, p in zip(before, zip(*parts))]

    def assert_update(after, before, contributors):
        for got, want, old in zip(after, expected(before, contributors), before):
            assert np.abs(want - old).max() > 1e-4, "the update itself must be measurable"
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6)

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        thetas = [theta()]
        np.testing.assert_allclose(thetas[0][0], initial[0])
        # Update 1: workers 0 and 1 at θ₀; three tokens holding step 1 go into the queue.
        updated = pool.submit(chief_session.run, aggregate)
        tokens = [pool.submit(step, 0), pool.submit(step, 1)]
        assert updated.result(timeout=60) == 1 and [t.result(60) for t in tokens] == [1, 1]
        thetas.append(theta())
        assert_update(thetas[1], thetas[0], [0, 1])
        # Update 2: worker 0 takes the third token at once, and steps again: both of the N.
        assert step(0) == 1
        assert chief_session.run(accumulated) == [1] * 4
        updated = pool.submit(chief_session.run, aggregate)
        assert step(0) == 2 and updated.result(timeout=60) == 2
        thetas.append(theta())
        assert_update(thetas[2], thetas[1], [0])
        # The straggler's gradient is tagged with step 0 (and worker 1's next with step 1):
        # both are dropped, and each takes one of the two tokens left, holding step 2.
        assert step(2) == 2 and step(1) == 2
        assert chief_session.run(accumulated) == [0] * 4
        # Update 3: workers 1 and 2, now at the current step.
        updated = pool.submit(chief_session.run, aggregate)
        tokens = [pool.submit(step, 1), pool.submit(step, 2)]
        assert updated.result(timeout=60) == 3 and [t.result(60) for t in tokens] == [3, 3]
        thetas.append(theta())
        assert_update(thetas[3], thetas[2], [1, 2])


# ---------------------------------------------------------------------------------------------
# Plain asynchronous SGD: one step on a real ps is θ ← θ − η·g of the minibatch it read.
# ---------------------------------------------------------------------------------------------
@pytest.mark.tf2
@pytest.mark.parametrize("script", ["Distributed-Setup/dist_setup.py",
                                    "Distributed-Setup/dist_setup_sup.py", MULTI_GPU])
def test_one_step_changes_theta_by_minus_eta_times_its_minibatch_gradient(script):
    """Two workers' graphs on in-process servers, steps alternating: each step fetches the
    minibatch it used, and θ after it must be θ − η·g(θ; minibatch), g recomputed with NumPy;
    the global step counts the steps of both."""
    module, flags, sessions = in_process_workers(script, 2, ["--learning_rate", "0.3"])
    sessions[0][0].run(sessions[0][2]["init_global"])
    theta = None
    for step, index in enumerate([0, 1, 1, 0], 1):
        session, graph, built = sessions[index]
        params = [v for v in graph.get_collection("variables") if v.op.name in PARAMS]
        batch = [op for op in graph.get_operations() if op.type == "IteratorGetNext"][0].outputs
        before = [value.astype(np.float64) for value in session.run(params)]
        if theta is not None:
            for got, want in zip(before, theta):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        global_step, images, labels = session.run([built["train_op"]] + list(batch))
        assert global_step == step
        expected = [value - 0.3 * g for value, g in zip(
            before, gradient(before, images.astype(np.float64), labels))]
        theta = [value.astype(np.float64) for value in session.run(params)]
        for got, want, old in zip(theta, expected, before):
            assert np.abs(want - old).max() > 1e-5, "the update itself must be measurable"
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
