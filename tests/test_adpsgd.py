"""AD-PSGD/: asynchronous decentralized parallel SGD (Lian et al. 2017), workers only.

The update rule and the locks are tested on real servers in this process (free localhost ports),
each worker with its own graph and session, exactly as its process would build them: a sequence
of steps chosen by the test, with full-shard batches, recomputed with NumPy after each one; and
three workers averaging with one replica at once, every averaging replayed in the order the
replica's counter gave it. The rest runs real clusters of worker processes: run.sh, the
neighbour schedule, a resumed run, a straggler, and a peer killed or frozen.
"""
import os
import re
import signal
import threading
import time

import numpy as np
import pytest

from helpers import (AFTER_START_TIMEOUT, assert_no_process_left, data_and_initial_theta, example,
                    free_ports, load_example, LocalCluster, output, rejected, results_in,
                    run_cluster, run_sh, worker_results)
from test_synchronous import SHARD, gradient

ADPSGD = "AD-PSGD/AD-PSGD.py"
RETRYABLE = 138
SERVERS = []  # the in-process servers live as long as the test process (TF 1.x cannot stop one)
NAMES = ["hidden_weights", "hidden_biases", "output_weights", "output_biases"]


def replica_name(worker, name):
    """Where θⱼ's variable is, in every graph and in the chief's checkpoints: worker<j>/name,
    θ₀'s at the root, by the name model() gives it (its counters: worker0/...)."""
    return "worker%d/%s" % (worker, name) if worker else name


def in_process_workers(workers, extra=()):
    """`workers` servers in this process and each worker's graph and session, started as
    train() starts them (the chief initializes every replica and hands out the first tokens).
    Returns (module, [(args, session, graph dict)])."""
    module = load_example(ADPSGD)
    tf = module.tf
    hosts = ",".join("localhost:%d" % port for port in free_ports(workers))
    flags = [module.parse_flags(["--job_name", "worker", "--task_index", str(index),
                                 "--worker_hosts", hosts, "--timeout", "40"] + list(extra))
             for index in range(workers)]
    spec = tf.train.ClusterSpec(flags[0].cluster)
    built = []
    for args in flags:
        config = module.session_config(args)
        config.device_filters.append("/job:worker")
        server = tf.train.Server(spec, job_name="worker", task_index=args.task_index,
                                 config=config)
        SERVERS.append(server)
        graph = tf.Graph()
        with graph.as_default():
            nodes = module.build_graph(args)
            nodes["init"] = tf.global_variables_initializer()
        built.append((args, tf.Session(server.target, graph=graph, config=config), nodes))
    _, chief_session, chief = built[0]
    chief_session.run(chief["init"])
    for _, session, nodes in built:
        session.run(nodes["start"])
    return module, built


def replicas(built):
    """Every θⱼ, read by the chief, as float64 vectors."""
    _, session, nodes = built[0]
    return [vector.astype(np.float64) for vector in session.run(nodes["every_replica"])]


def pieces(vector, like):
    """A packed θ as its four arrays (the inverse of the script's pack)."""
    sizes = np.cumsum([value.size for value in like])[:-1]
    return [piece.reshape(value.shape) for piece, value in zip(np.split(vector, sizes), like)]


@pytest.mark.tf2
def test_every_step_averages_both_replicas_then_applies_the_gradient_taken_before():
    """Three workers, η = 0.5, each batch one whole shard (each g is the full-shard gradient),
    steps in an order the test picks. After every step, every replica must be what NumPy makes
    of it: g ← ∇F(θᵢ) on shard i, then θᵢ, θⱼ ← (θᵢ + θⱼ)/2, then θᵢ ← θᵢ − η·g; every other
    replica unchanged. Each step returns i's step counter and the averaging's place in the
    history of θᵢ and of θⱼ."""
    eta, workers = 0.5, 3
    module, built = in_process_workers(workers, ["--batch_size", str(SHARD),
                                                 "--learning_rate", str(eta)])
    (images, labels), _ = data_and_initial_theta(module, 0)[0]
    shards = [(images[i::workers].astype(np.float64), labels[i::workers])
              for i in range(workers)]
    assert all(len(shard_labels) == SHARD for _, shard_labels in shards)
    initial = data_and_initial_theta(module)[1]
    expected = [np.concatenate([value.ravel() for value in initial])] * workers
    for got in replicas(built):
        np.testing.assert_allclose(got, expected[0], rtol=1e-6)
    steps, averagings = [0] * workers, [0] * workers
    for worker, peer in [(0, 1), (1, 2), (2, 0), (1, 0), (0, 2), (2, 1), (0, 1), (2, 0)]:
        _, session, nodes = built[worker]
        step, places = session.run(nodes["step_with"][peer])
        g = np.concatenate([part.ravel() for part in gradient(
            pieces(expected[worker], initial), *shards[worker])])
        mean = (expected[worker] + expected[peer]) / 2
        expected = list(expected)
        expected[peer], expected[worker] = mean, mean - eta * g
        steps[worker] += 1
        averagings[worker] += 1
        averagings[peer] += 1
        assert step == steps[worker]
        assert list(places) == [averagings[worker], averagings[peer]]
        for index, (got, want) in enumerate(zip(replicas(built), expected)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6,
                                       err_msg="θ%d after worker %d averaged with worker %d"
                                       % (index, worker, peer))
    assert len({round(float(np.abs(value).sum()), 3) for value in expected}) == workers


def test_concurrent_averagings_of_one_replica_never_interleave():
    """Workers 1 and 2 average with θ₀ over and over while worker 0 averages with each of them
    in turn, all at once, each step with a random gradient fed in. Every averaging involves θ₀,
    so θ₀'s counter orders them all; replayed in that order with NumPy they must give every
    final replica exactly. An averaging outside the locks (a lost update), a lock given back
    before the writes, or one side of the mean not written breaks the replay; locks taken in an
    order that can deadlock time out."""
    workers, steps = 3, 80
    module, built = in_process_workers(workers, ["--learning_rate", "0.5"])
    tf = module.tf
    eta = np.float64(np.float32(0.5))
    start = replicas(built)
    size = start[0].size
    records, errors = [], []

    def hammer(worker):
        _, session, nodes = built[worker]
        rng = np.random.RandomState(worker)
        try:
            for step in range(steps):
                peer = 0 if worker else 1 + step % 2
                g = rng.normal(scale=0.05, size=size).astype(np.float32)
                _, places = session.run(nodes["step_with"][peer], {nodes["gradient"]: g},
                                        options=tf.RunOptions(timeout_in_ms=30000))
                records.append((worker, peer, g.astype(np.float64), list(places)))
        except tf.errors.OpError as error:
            errors.append("worker%d: %s" % (worker, module.error_line(error)))

    threads = [threading.Thread(target=hammer, args=(worker,)) for worker in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert len(records) == workers * steps

    def place_on(replica, record):
        worker, peer, _, places = record
        return places[0] if worker == replica else places[1] if peer == replica else None

    records.sort(key=lambda record: place_on(0, record))
    assert [place_on(0, record) for record in records] == list(range(1, len(records) + 1))
    for replica in (1, 2):  # θ₁'s and θ₂'s own histories agree with θ₀'s order
        own = [place_on(replica, record) for record in records
               if place_on(replica, record) is not None]
        assert own == list(range(1, len(own) + 1)), (replica, own)
    thetas = [value.copy() for value in start]
    for worker, peer, g, _ in records:
        mean = (thetas[worker] + thetas[peer]) / 2
        thetas[peer], thetas[worker] = mean, mean - eta * g
    for index, (got, want) in enumerate(zip(replicas(built), thetas)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg="θ%d" % index)


def graph_of_worker(index, workers=3):
    module = load_example(ADPSGD)
    hosts = ",".join("localhost:%d" % port for port in free_ports(workers))
    args = module.parse_flags(["--job_name", "worker", "--task_index", str(index),
                               "--worker_hosts", hosts])
    graph = module.tf.Graph()
    with graph.as_default():
        nodes = module.build_graph(args)
    return module, graph, nodes


def ancestors(tensors_or_ops):
    """Every op that the given ones depend on, through inputs and control inputs."""
    stack = [getattr(item, "op", item) for item in tensors_or_ops]
    seen = set()
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack += [tensor.op for tensor in op.inputs] + list(op.control_inputs)
    return seen


@pytest.mark.tf2
@pytest.mark.parametrize("me", [0, 1, 2])
def test_each_step_takes_both_locks_in_index_order_around_every_read_and_write(me):
    """Worker `me`'s graph (of three), the step with each neighbour j: it takes the lock of the
    lower-indexed replica, then the other's (both only after g is computed), reads θᵢ and θⱼ and
    writes both (and the counters) only while it holds both, and gives both back after its
    last write."""
    _, graph, nodes = graph_of_worker(me)
    gradient_ops = ancestors([nodes["gradient"]])
    for peer, (global_step, places) in nodes["step_with"].items():
        closure = ancestors([global_step, places])
        queue_ops = [op for op in closure if op.type.startswith(("QueueDequeue", "QueueEnqueue"))]
        lock_of = {op: op.inputs[0].op.get_attr("shared_name").decode() for op in queue_ops}
        takes = sorted((op for op in queue_ops if op.type.startswith("QueueDequeue")),
                       key=lock_of.get)
        gives = [op for op in queue_ops if op.type.startswith("QueueEnqueue")]
        lower, upper = sorted([me, peer])
        assert [lock_of[op] for op in takes] == ["worker%d/lock" % lower, "worker%d/lock" % upper]
        first, second = takes
        assert first in ancestors([second]), "the lower-indexed lock is taken first"
        assert gradient_ops & ancestors([first]) >= {nodes["gradient"].op}, "g before the locks"
        assert sorted(lock_of[op] for op in gives) == sorted(lock_of[op] for op in takes)
        inside = ancestors(gives) - ancestors([second]) - gradient_ops
        accesses = [op for op in closure - gradient_ops
                    if op.type in ("ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp")]
        assert accesses and all(op in inside for op in accesses), [
            op.name for op in accesses if op not in inside]
        assert all(second in ancestors([op]) for op in accesses), "each access after both takes"
        written = {op.inputs[0].op.name for op in accesses if op.type != "ReadVariableOp"}
        assert written == {replica_name(j, name) for j in (me, peer) for name in NAMES} | {
            "worker%d/averagings" % me, "worker%d/averagings" % peer, "worker%d/global_step" % me}


def test_every_replica_lives_on_its_own_workers_task_with_the_same_names_in_every_graph():
    names = {}
    for me in range(3):
        _, graph, nodes = graph_of_worker(me)
        handles = [op for op in graph.get_operations() if op.type == "VarHandleOp"]
        names[me] = sorted((op.get_attr("shared_name").decode(), op.device) for op in handles)
        for name, device in names[me]:  # worker<j>/... on task j, θ₀ by model()'s names
            task = 0 if name in NAMES else int(name.split("/")[0][len("worker"):])
            assert device == "/job:worker/task:%d" % task, name
        with graph.as_default():  # the chief's graph holds every replica; it alone initializes
            held = len(graph.get_collection("variables"))
        assert held == (3 * 6 if me == 0 else 0), held
    assert names[0] == names[1] == names[2] and len(names[0]) == 3 * 6


def test_the_schedule_draws_every_other_worker_uniformly_and_never_itself():
    module = load_example(ADPSGD)
    for workers in (2, 3, 5):
        for worker in range(workers):
            schedule = module.neighbour_schedule(0, worker, workers)
            draws = np.bincount([next(schedule) for _ in range(4000)], minlength=workers)
            assert draws[worker] == 0
            others = np.delete(draws, worker)
            assert others.min() > 0.8 * 4000 / (workers - 1), draws


@pytest.mark.tf2
def test_run_sh_reaches_accuracy_on_every_worker_without_a_ps():
    """`bash run.sh` with its defaults, from another directory: two workers and no ps, each at
    ≥ 0.93, every process exits 0; each replica took part in its own 1,000 averagings and its
    peer's; worker 0 reports a small consensus distance."""
    text = run_sh(ADPSGD)
    results = sorted(results_in(text), key=lambda r: r["task_index"])
    assert [r["task_index"] for r in results] == [0, 1], text
    assert all(r["test_accuracy"] >= 0.93 for r in results), results
    assert [(r["global_step"], r["local_steps"], r["averagings"]) for r in results] == [
        (1000, 1000, 2000)] * 2
    assert 0 < results[0]["consensus_distance"] < 0.2, results[0]
    assert "[ps0]" not in text and "all 2 workers are done; exiting" in text, text
    assert re.search(r"\[worker0\] consensus distance .* = 0\.\d+", text), text
    assert "ad_psgd: 2 worker(s)" in text


def test_three_workers_average_with_the_neighbours_their_schedules_draw():
    """Each replica's count of averagings is its own steps plus the steps of the peers whose
    schedules drew it, replayed here: the training loop follows the seeded schedule."""
    module, workers, steps = load_example(ADPSGD), 3, 60
    cluster = run_cluster(ADPSGD, workers=workers, args=["--train_steps", str(steps),
                                                         "--seed", "3"])
    results = worker_results(cluster)
    drawn = np.zeros(workers, int)
    for worker in range(workers):
        schedule = module.neighbour_schedule(3, worker, workers)
        for _ in range(steps):
            drawn[next(schedule)] += 1
    assert [r["averagings"] for r in results] == list(steps + drawn), (results, drawn)
    assert "consensus_distance" in results[0] and "consensus_distance" not in results[1]


def test_a_run_resumed_from_log_dir_restores_every_replica(tmp_path):
    """The chief checkpoints every replica (θⱼ and its step counter): a second run with more
    --train_steps starts every worker at the step where the first ended. In the first run
    worker1 is slow (0.05 s a step): the chief saves at its own step 40 while worker1 still
    steps, so only a save at the end, after every replica is final, has worker1 at 40 (a
    CheckpointSaverHook skips it, its global step, the chief's own counter, being unmoved)."""
    log_dir = str(tmp_path / "logs")
    args = ["--log_dir", log_dir, "--checkpoint_every", "20"]
    run_cluster(ADPSGD, workers=2, args=["--train_steps", "40"] + args,
                task_args={"worker1": ["--step_delay", "0.05"]})
    cluster = run_cluster(ADPSGD, workers=2, args=["--train_steps", "60"] + args)
    results = worker_results(cluster)
    assert [(r["first_global_step"], r["global_step"]) for r in results] == [(40, 60)] * 2
    assert re.search(r"resuming from \S+model.ckpt-40", output(cluster, "worker0"))


def test_a_straggler_is_waited_for_at_the_end_as_long_as_it_steps():
    """Worker 1 sleeps 0.15 s after each step: worker 0 ends its 60 steps ~9 s before it, more
    than half of --timeout (6 s), and waits for it, since its step counter moves."""
    cluster = run_cluster(ADPSGD, workers=2, args=["--train_steps", "60", "--timeout", "12",
                                                   "--log_every", "60"],
                          task_args={"worker1": ["--step_delay", "0.15"]})
    results = worker_results(cluster)
    assert [r["global_step"] for r in results] == [60, 60]
    # worker 0's progress line at its last step gives its steps/s until then; the rest of its
    # wall time it waited.
    rate = float(re.search(r"step 60 .* (\d+) steps/s", output(cluster, "worker0")).group(1))
    assert results[0]["wall_seconds"] - 60 / rate > 6, (rate, results)


@pytest.mark.parametrize("fault", ["killed", "frozen"])
def test_a_lost_peer_ends_the_other_within_the_timeout_naming_it(fault):
    """worker1 SIGKILLed or SIGSTOPped mid-run: worker0's next averaging with it gets no
    answer; within --timeout worker0 names it (port closed: stopped; port open: frozen) and
    exits with the retryable code."""
    victim, survivor = "worker1", "worker0"
    cluster = LocalCluster(example(ADPSGD), workers=2, echo=False, args=[
        "--train_steps", "1000000", "--log_every", "50", "--timeout", AFTER_START_TIMEOUT])
    try:
        cluster.start()
        assert cluster.wait_for_line(survivor, r"step 100 ", 120), output(cluster)
        os.kill(cluster.task(victim).process.pid,
                signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
        lost_at = time.monotonic()
        assert cluster.wait_for(lambda: cluster.task(survivor).returncode is not None,
                                float(AFTER_START_TIMEOUT) + 20), output(cluster)
        took = time.monotonic() - lost_at
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert cluster.task(survivor).returncode == RETRYABLE, output(cluster)
    assert took < float(AFTER_START_TIMEOUT) + 5, took
    host = re.escape(cluster.worker_hosts[1])
    why = r"worker1 \(%s\) stopped \(its port is closed\)" % host if fault == "killed" else (
        r"every port is open, so it, or a worker that holds a lock it needs, is frozen")
    assert re.search(r"\[worker0\] error: no answer from worker1 \(%s\) within %g s: %s"
                     % (host, float(AFTER_START_TIMEOUT) / 2, why), output(cluster, survivor)), \
        output(cluster)


def test_one_worker_gets_one_line_and_exit_2(capsys):
    """(What every script without a ps refuses is in test_bad_input.py.)"""
    assert "at least two workers" in rejected(
        load_example(ADPSGD), ["--worker_hosts", "localhost:%d" % free_ports(1)[0]], capsys)
