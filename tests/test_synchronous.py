"""The synchronous family: Synchronous-SGD/ (SSGD, backup workers), Synchronous-SGD-different-
learning-rates/ (a rate per worker) and SAGN/ (T local steps, then a synchronous exchange).

Every run is a real cluster on free localhost ports. The exact-update tests use three workers
and a batch of 479 examples, one whole shard of the 1,437 training images: each minibatch
gradient is then the full-shard gradient (the order of the examples does not matter), so the
test can recompute every update with NumPy and compare it with the checkpoints the chief saved
after each global step.
"""
import itertools
import os
import re
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from helpers import (AFTER_START_TIMEOUT, assert_no_process_left, data_and_initial_theta, example,
                    free_ports, last_checkpoint_step, listening, load_example, LocalCluster, output,
                    results_in, ROOT, run_cluster, run_script, start_the_chief_last, wait_until,
                    worker_results)
from test_asynchronous import cluster_flags, in_process_cluster, worker_args

SSGD = "Synchronous-SGD/ssgd.py"
RATES = "Synchronous-SGD-different-learning-rates/ssgd.py"
SAGN = "SAGN/SAGN.py"
LOCAL_SGD = "Local-SGD/Local-SGD.py"
SHARD = 479  # 1,437 training images / 3 workers


def ps_says_all_done(cluster, workers):
    return "all %d workers are done; exiting" % workers in output(cluster, "ps0")


# ---------------------------------------------------------------------------------------------
# Default settings: accuracy, and how many steps each worker made.
# ---------------------------------------------------------------------------------------------
@pytest.mark.tf2
def test_ssgd_reaches_accuracy_and_the_workers_make_m_steps_per_update():
    cluster = run_cluster(SSGD, workers=2)
    results = worker_results(cluster)
    assert all(r["test_accuracy"] >= 0.93 for r in results), results
    # N = M: each update took N gradients and put M tokens in the queue (none at the start);
    # each worker took a token per step (almost always one per update: see
    # assert_updates_are_means_of_fresh_contributions), and both left after the last update.
    assert all(r["global_step"] == 1000 for r in results), results
    tokens_taken(results, 1000, [r["local_steps"] for r in results])
    assert ps_says_all_done(cluster, 2)


@pytest.mark.tf2
def test_different_learning_rates_reach_accuracy():
    cluster = run_cluster(RATES, workers=2)
    results = worker_results(cluster)
    assert all(r["test_accuracy"] >= 0.93 for r in results), results
    assert all(r["global_step"] == 1000 for r in results), results
    tokens_taken(results, 1000, [r["local_steps"] for r in results])
    assert ps_says_all_done(cluster, 2)


@pytest.mark.tf2
def test_sagn_reaches_accuracy_with_window_local_steps_per_round():
    cluster = run_cluster(SAGN, workers=2)
    results = worker_results(cluster)
    assert all(r["test_accuracy"] >= 0.93 for r in results), results
    rounds, window = results[0]["global_step"], 4
    assert rounds == 300
    assert [r["local_steps"] % window for r in results] == [0] * 2, "T local steps per round"
    tokens_taken(results, rounds, [r["local_steps"] // window for r in results])
    assert ps_says_all_done(cluster, 2)


# ---------------------------------------------------------------------------------------------
# Exact updates, recomputed with NumPy from the data and the initial θ.
# ---------------------------------------------------------------------------------------------
def gradient(params, images, labels):
    """The mean softmax cross-entropy gradient of the 64→128→10 ReLU network, in float64."""
    hidden_weights, hidden_biases, output_weights, output_biases = params
    before_relu = images @ hidden_weights + hidden_biases
    hidden = np.maximum(before_relu, 0)
    logits = hidden @ output_weights + output_biases
    probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    probabilities[np.arange(len(labels)), labels] -= 1
    d_logits = probabilities / len(labels)
    d_hidden = (d_logits @ output_weights.T) * (before_relu > 0)
    return [images.T @ d_hidden, d_hidden.sum(axis=0), hidden.T @ d_logits,
            d_logits.sum(axis=0)]


def shards_and_initial_parameters(script, workers):
    module = load_example(script)
    (images, labels), _ = data_and_initial_theta(module, 0)[0]
    shards = [(images[i::workers].astype(np.float64), labels[i::workers])
              for i in range(workers)]
    assert all(len(shard_labels) == SHARD for _, shard_labels in shards)
    initial = data_and_initial_theta(module)[1]
    return module, shards, initial


def run_and_read_checkpoints(script, tmp_path, steps, args):
    """Three workers, full-shard batches, a checkpoint after every global step: θ after each."""
    log_dir = str(tmp_path / "logs")
    cluster = run_cluster(script, workers=3, args=[
        "--train_steps", str(steps), "--batch_size", str(SHARD), "--log_dir", log_dir,
        "--checkpoint_every", "1"] + args)
    results = worker_results(cluster)
    assert all(r["global_step"] == steps for r in results), results
    assert ps_says_all_done(cluster, 3)
    tf = load_example(script).tf
    names = ["hidden_weights", "hidden_biases", "output_weights", "output_biases"]
    thetas = []
    for step in range(steps + 1):
        reader = tf.train.load_checkpoint(os.path.join(log_dir, "model.ckpt-%d" % step))
        assert reader.get_tensor("global_step") == step
        thetas.append([reader.get_tensor(name).astype(np.float64) for name in names])
    return results, thetas


def assert_parameters_close(actual, expected, previous):
    for got, want, before in zip(actual, expected, previous):
        assert np.abs(want - before).max() > 1e-4, "the update itself must be measurable"
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6)


def assert_updates_are_means_of_fresh_contributions(thetas, contribution, steps):
    """Every update is θ ← θ + the mean of N = M contributions, each computed at that same θ by
    one worker: contribution(θ, i, k) is worker i's in update k (−η·gᵢ(θ) in SSGD). Almost
    always each worker sends one, but SyncReplicasOptimizer does not check who sent the N
    (Synchronous-SGD/README.md): a worker that takes a second token of an update before a slow
    one has taken its first sends a second contribution at the same θ, and the slow one's next
    counts in the update after. So each update must match exactly one multiset of workers, and
    worker i's synchronous steps, steps[i], be the times it appears in them."""
    workers, appearances = len(steps), [0] * len(steps)
    for update, (before, after) in enumerate(zip(thetas, thetas[1:])):
        terms = [contribution(before, i, update) for i in range(workers)]
        matches = []
        for chosen in itertools.combinations_with_replacement(range(workers), workers):
            mean = [np.mean(parts, axis=0) for parts in zip(*[terms[i] for i in chosen])]
            assert all(np.abs(part).max() > 1e-4 for part in mean), "must be measurable"
            if all(np.allclose(got, value + part, rtol=1e-4, atol=2e-6)
                   for got, value, part in zip(after, before, mean)):
                matches.append(chosen)
        assert len(matches) == 1, "update %d: not one mean of %d fresh contributions, %s" % (
            update, workers, matches)
        if matches[0] != tuple(range(workers)):
            print("an update averaged the contributions of workers %s" % (matches[0],))
        for i in matches[0]:
            appearances[i] += 1
    assert appearances == list(steps), (appearances, steps)


@pytest.mark.tf2
def test_one_ssgd_step_changes_theta_by_minus_eta_times_the_mean_gradient(tmp_path):
    """With Goyal et al.'s scaling rule (N = 3) and a warm-up of two updates: update 0 uses
    η₀ = 0.5, update 1 η₀ + (3·η₀ − η₀)/2 = 1.0."""
    _, shards, initial = shards_and_initial_parameters(SSGD, 3)
    results, thetas = run_and_read_checkpoints(SSGD, tmp_path, 2, [
        "--learning_rate", "0.5", "--scale_learning_rate", "--warmup_steps", "2"])
    assert_updates_are_means_of_fresh_contributions(thetas, lambda theta, i, update: [
        -[0.5, 1.0][update] * part for part in gradient(theta, *shards[i])],
        [r["local_steps"] for r in results])
    assert_parameters_close(thetas[0], initial, [value + 1 for value in initial])


@pytest.mark.tf2
def test_one_step_with_a_rate_per_worker_changes_theta_by_minus_the_mean_of_eta_i_g_i(tmp_path):
    rates = [0.9, 0.3, 0.05]
    _, shards, initial = shards_and_initial_parameters(RATES, 3)
    results, thetas = run_and_read_checkpoints(RATES, tmp_path, 2, [
        "--learning_rates", ",".join(map(str, rates))])
    assert_updates_are_means_of_fresh_contributions(thetas, lambda theta, i, update: [
        -rates[i] * part for part in gradient(theta, *shards[i])],
        [r["local_steps"] for r in results])
    assert_parameters_close(thetas[0], initial, [value + 1 for value in initial])


@pytest.mark.tf2
def test_one_sagn_round_changes_theta_by_the_mean_normalized_accumulated_update(tmp_path):
    """Two rounds: the second one shows that every worker started it from the same new θ."""
    window, rate = 3, 0.5
    _, shards, initial = shards_and_initial_parameters(SAGN, 3)
    results, thetas = run_and_read_checkpoints(SAGN, tmp_path, 2, [
        "--window", str(window), "--learning_rate", str(rate)])

    def normalized_update(theta, i, update):  # T local steps from θ, divided by T
        local = [value.copy() for value in theta]
        for _ in range(window):
            local = [value - rate * part
                     for value, part in zip(local, gradient(local, *shards[i]))]
        return [(end - start) / window for end, start in zip(local, theta)]

    assert [r["local_steps"] % window for r in results] == [0] * 3, "T local steps per round"
    assert_updates_are_means_of_fresh_contributions(
        thetas, normalized_update, [r["local_steps"] // window for r in results])
    assert_parameters_close(thetas[0], initial, [value + 1 for value in initial])


def test_sagn_keeps_the_local_copy_in_local_variables_on_the_worker():
    module = load_example(SAGN)
    ps, worker0, worker1 = ("localhost:%d" % port for port in free_ports(3))
    args = module.parse_flags(["--job_name", "worker", "--task_index", "1", "--ps_hosts", ps,
                               "--worker_hosts", "%s,%s" % (worker0, worker1)])
    with module.tf.Graph().as_default():
        built = module.build_graph(args)
        built["optimizer"].ready_for_local_init_op.mark_used()  # used by the session hook
        global_variables = module.tf.global_variables()
        assert len(global_variables) == 5  # θ and the global step, nothing of the workers'
        assert all(v.device == "/job:ps/task:0" for v in global_variables)
        local_names = {v.op.name for v in module.tf.local_variables()}
        assert {v.op.name for v in built["local_params"]} <= local_names
        assert all(v.device == "/job:worker/task:1" for v in built["local_params"])


@pytest.mark.parametrize("script", [SAGN, LOCAL_SGD])
def test_a_session_created_mid_round_pulls_theta_before_the_round_goes_on(script, monkeypatch):
    """A session (re-)created mid-round, after its ps came back, holds θᵢ and the round's start
    at their initial values; the lesson's PullWhenTheSessionIsCreated runs the pull there, so
    that the rest of the round steps from the ps's θ. train() hands it to the session, and
    running it sets both to θ (here θ on the ps is moved away from the initial values first)."""
    module, _, [worker] = in_process_cluster(script, 1, [])
    worker.initialize(chief=True)
    tf, built = module.tf, worker.built
    with worker.graph.as_default():
        params = tf.trainable_variables()
        moved = [tf.assign_add(param, tf.ones_like(param)) for param in params]
        copies = {prefix: [worker.graph.get_tensor_by_name(prefix + param.op.name + ":0")
                           for param in params] for prefix in ("local/", "round_start/")}
    theta = worker.session.run(moved)
    for prefix, variables in copies.items():
        assert not any(np.array_equal(v, t) for v, t in zip(worker.session.run(variables),
                                                             theta)), prefix
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
    for prefix, variables in copies.items():
        assert all(np.array_equal(v, t) for v, t in zip(worker.session.run(variables),
                                                         theta)), prefix


# ---------------------------------------------------------------------------------------------
# Every process exits 0 with 2, 3 (above) and 4 workers, with backup workers, and from run.sh.
# (The different-rates script shares every line of the synchronous machinery with SSGD.)
# ---------------------------------------------------------------------------------------------
def tokens_taken(results, updates, synchronous_steps):
    """Every update puts one token per worker (M) in the queue, and every synchronous step takes
    one; a worker that started after the last update (a slow start on a busy machine) takes
    none, and its token stays in the queue. So the steps of all workers together are exactly
    M x updates, less one for each worker that made no step at all."""
    late = sum(steps == 0 for steps in synchronous_steps)
    assert sum(synchronous_steps) == len(results) * updates - late, (synchronous_steps, results)


@pytest.mark.parametrize("script, delay", [(SSGD, 0.4), (SAGN, 0.1)])
def test_four_workers_with_a_backup_worker_do_not_wait_for_a_straggler(script, delay, tmp_path):
    """M = 4, N = 3, worker3 sleeping after each local step (0.4 s a synchronous step, for
    SAGN's T = 4 local steps too), the others 40 times less (so that the run lasts seconds: the
    chief's first checkpoint must not take the time of a whole run, as it did once when 60
    updates went by in under a second). The updates go on at the pace of the three others: the
    straggler makes far fewer synchronous steps than there are updates (had the ps waited for
    all M, it would have made exactly one per update, in at least 60 s). Every token is taken,
    every process exits 0, and the chief's last checkpoint is at --train_steps (150: no multiple
    of --checkpoint_every)."""
    steps, log_dir = 150, str(tmp_path / "logs")
    cluster = run_cluster(script, workers=4, args=[
        "--train_steps", str(steps), "--replicas_to_aggregate", "3", "--log_dir", log_dir],
        task_args=dict({"worker%d" % i: ["--step_delay", str(delay / 40)] for i in range(3)},
                       worker3=["--step_delay", str(delay)]))
    results = worker_results(cluster)
    assert all(r["global_step"] == steps for r in results), results
    window = 4 if script == SAGN else 1
    assert [r["local_steps"] % window for r in results] == [0] * 4, "T local steps per round"
    synchronous_steps = [r["local_steps"] // window for r in results]
    assert synchronous_steps[3] < steps / 4, synchronous_steps
    assert min(synchronous_steps[:3]) > synchronous_steps[3], synchronous_steps
    tokens_taken(results, steps, synchronous_steps)
    assert ps_says_all_done(cluster, 4)
    assert last_checkpoint_step(log_dir) == steps


def test_run_sh_with_a_backup_worker_from_another_directory():
    code, text = run_script(["bash", example("Synchronous-SGD/run.sh"),
                             "--replicas_to_aggregate", "2", "--train_steps", "200"],
                            env={"WORKERS": "3"}, cwd=ROOT)
    assert code == 0, text
    results = results_in(text)
    assert sorted(r["task_index"] for r in results) == [0, 1, 2], text
    assert all(r["global_step"] == 200 for r in results)
    tokens_taken(results, 200, [r["local_steps"] for r in results])
    assert "ssgd: 3 worker(s)" in text and "all 3 workers are done" in text


# ---------------------------------------------------------------------------------------------
# A worker killed mid-run: bounded, named, nothing left running.
# ---------------------------------------------------------------------------------------------
def kill_mid_run(script, workers, victim, args, started_after_the_kill=()):
    cluster = LocalCluster(example(script), workers=workers, echo=False,
                           args=["--log_every", "50"] + args)
    try:
        cluster.start([task.name for task in cluster.tasks
                       if task.name not in started_after_the_kill])
        assert cluster.wait_for_line(victim, r"step 100 ", 120), output(cluster)
        cluster.kill(victim)
        cluster.start(started_after_the_kill)
        assert cluster.wait(60, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    return cluster


def test_without_backup_workers_a_dead_worker_ends_everyone_with_its_name():
    cluster = kill_mid_run(SSGD, 2, "worker1", ["--train_steps", "1000000",
                                                "--timeout", AFTER_START_TIMEOUT])
    assert cluster.returncodes() == {"ps0": 1, "worker0": 138, "worker1": -signal.SIGKILL}
    port = cluster.worker_hosts[1]
    assert re.search(r"\[worker0\] error: worker1 \(%s\) is gone before the end of training "
                     r".*every update needs 2 workers" % port, output(cluster, "worker0"))
    assert "error: worker1 (%s) stopped without finishing" % port in output(cluster, "ps0")


@pytest.mark.tf2
def test_with_a_backup_worker_the_others_finish_without_the_dead_one():
    """worker0 and worker1 sleep 0.01 s after each local step: a round needs two commits of T = 4
    local steps from them, so without worker2 the 300 rounds take them at least 12 s, and
    worker2 (started with them, before the chief) reaches its step 100 (25 rounds) well before.
    It is killed there; the others finish the 300 rounds without it."""
    cluster = LocalCluster(example(SAGN), workers=3, echo=False, args=[
        "--log_every", "50", "--replicas_to_aggregate", "2", "--train_steps", "300",
        "--timeout", "30"],  # the ps waits that long for worker2 to come back (60 s by default)
        task_args={name: ["--step_delay", "0.01"] for name in ("worker0", "worker1")})
    try:
        start_the_chief_last(cluster)
        assert cluster.wait_for_line("worker2", r"step 100 ", 120), output(cluster)
        assert cluster.task("worker0").result() is None, "the others were still training"
        cluster.kill("worker2")
        assert cluster.wait(120, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert cluster.returncodes() == {"ps0": 1, "worker0": 0, "worker1": 0,
                                     "worker2": -signal.SIGKILL}
    assert all(cluster.task(name).result()["global_step"] == 300
               for name in ("worker0", "worker1"))
    assert "worker2 (%s) is gone" % cluster.worker_hosts[2] in output(cluster, "worker0")
    assert "worker2 (%s) stopped without finishing" % cluster.worker_hosts[2] in output(
        cluster, "ps0")


def test_a_dead_chief_ends_everyone_even_with_backup_workers():
    """worker2 only starts once the chief is dead (as a slow start on a busy machine can): the
    chief let it in, so it too knows whom it misses. --timeout 30: the ps gives a worker that
    never came up --timeout from its own start, and on a crowded machine (6 test processes on 2
    cores) the chief's 100th step, after which worker2 starts, came more than 10 s after the
    ps's start: the ps gave up on worker2 and exited, and worker1, losing the ps before it
    could read the global step, named the ps instead of the dead chief."""
    cluster = kill_mid_run(RATES, 3, "worker0", ["--replicas_to_aggregate", "2",
                                                 "--train_steps", "1000000", "--timeout", "30"],
                           started_after_the_kill=["worker2"])
    assert cluster.returncodes() == {"ps0": 1, "worker0": -signal.SIGKILL, "worker1": 138,
                                     "worker2": 138}
    for name in ("worker1", "worker2"):
        assert "error: worker0 (%s) is gone before the end of training" % (
            cluster.worker_hosts[0]) in output(cluster, name)
        assert "it was the chief" in output(cluster, name)
    assert "worker0 (%s) stopped without finishing" % cluster.worker_hosts[0] in output(
        cluster, "ps0")


def test_a_dead_chief_is_named_even_when_the_ps_goes_away_while_the_others_wait():
    """worker1 sees the chief gone while the ps answers, and waits for it (half of --timeout);
    the ps is killed meanwhile. worker1 still names the chief, the cause, not the ps."""
    cluster = LocalCluster(example(SSGD), workers=2, echo=False, args=[
        "--log_every", "50", "--train_steps", "1000000", "--timeout", "20"])
    try:
        cluster.start()
        assert cluster.wait_for_line("worker0", r"step 100 ", 120), output(cluster)
        cluster.kill("worker0")
        assert cluster.wait_for_line("worker1", r"waiting up to 10 s", 60), output(cluster)
        cluster.kill("ps0")
        assert cluster.wait(60, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert cluster.returncodes()["worker1"] == 138, output(cluster)
    assert re.search(r"\[worker1\] error: worker0 \(%s\) is gone before the end of training.*it "
                     r"was the chief" % cluster.worker_hosts[0], output(cluster, "worker1"))
    assert "lost the parameter server" not in output(cluster, "worker1")


# ---------------------------------------------------------------------------------------------
# A chief killed inside an aggregation, restarted: the workers it left waiting go on.
# ---------------------------------------------------------------------------------------------
SERVERS = []  # tf.train.Server cannot be stopped in TensorFlow 1.x; they live until pytest ends


class InProcessWorker:
    """One worker of an SSGD cluster whose servers run in this process: its graph, session and
    SynchronousTrainingHook, whose failures are recorded (not os._exit) and whose watch over
    the peers is off (no peer dies here)."""

    def __init__(self, module, args, server):
        tf, self.tf, self.args = module.tf, module.tf, args
        self.graph, self.server = tf.Graph(), server
        with self.graph.as_default():
            self.built = module.build_graph(self.args)
            self.hook = module.SynchronousTrainingHook(self.args, server, self.built, None)
            self.initialize_theta = tf.global_variables_initializer()
            self.initialize_locals = tf.local_variables_initializer()
            # What a chief's aggregation does before it was killed: take the round's gradients
            # (its own, here zeros of step 0, and the others').
            workers, taken = len(self.args.cluster["worker"]), []
            for accumulator, device in self.built["optimizer"]._accumulator_list:
                with tf.device(device):
                    sent = accumulator.apply_grad(tf.zeros(accumulator._shape), local_step=0)
                    with tf.control_dependencies([sent]):
                        taken.append(accumulator.take_grad(workers))
            self.take_the_round = taken
            self.tokens_left = self.built["optimizer"]._sync_token_queue.size()
        self.failures = []
        self.hook.fail = lambda message, tell_the_ps=False: self.failures.append(message)
        self.hook.watch_peers = lambda: None
        self.config = module.session_config(self.args)
        self.session = self.new_session()

    def new_session(self):
        return self.tf.Session(self.server.target, graph=self.graph, config=self.config)

    def steps_in_a_thread(self, until):
        """Synchronous steps until a token holds global step `until`; the tokens taken go to
        self.tokens, an error to self.error."""
        self.tokens, self.error = [], None

        def steps():
            try:
                while not self.tokens or self.tokens[-1] < until:
                    self.tokens.append(self.session.run(self.built["train_op"]))
            except Exception as error:  # (the test reports it)
                self.error = error
        self.thread = threading.Thread(target=steps, daemon=True)
        self.thread.start()


@pytest.mark.tf2
def test_a_restarted_chief_releases_the_workers_waiting_for_the_update_it_was_making():
    """The state a chief killed inside its aggregation can leave (its step on the ps cancelled
    after take_grad, before the tokens; a CI run once hit it): worker1 and worker2 have sent
    their gradients of step 0 and wait for tokens, the accumulators have been emptied, and no
    token will come. The chief, restarted, joins the live θ: with its first step it must put a
    token in the queue for each of the two, and then updates complete again, up to
    --train_steps."""
    module = load_example(SSGD)
    tf, hosts = module.tf, ["localhost:%d" % port for port in free_ports(4)]
    argv = ["--ps_hosts", hosts[0], "--worker_hosts", ",".join(hosts[1:]), "--train_steps", "5",
            "--timeout", "30"]
    flags = [module.parse_flags(["--job_name", "worker", "--task_index", str(index)] + argv)
             for index in range(3)]  # (before the servers: it checks that the port is free)
    spec = tf.train.ClusterSpec(flags[0].cluster)
    SERVERS.append(tf.train.Server(spec, job_name="ps", task_index=0))
    SERVERS.extend(tf.train.Server(spec, job_name="worker", task_index=index)
                   for index in range(3))
    chief, *others = [InProcessWorker(module, flags[index], SERVERS[index - 3])
                      for index in range(3)]
    # The old chief starts the run; the others start their steps of global step 0.
    chief.session.run(chief.initialize_theta)
    for worker in [chief] + others:
        worker.session.run(worker.initialize_locals)
        worker.session.run(worker.hook.init_op)
    for worker in others:
        worker.steps_in_a_thread(until=5)
    # Its aggregation takes the three gradients, and it dies: no update, no tokens.
    chief.session.run(chief.take_the_round, options=tf.RunOptions(timeout_in_ms=60000))
    chief.session.close()
    # Restarted, it joins the live θ (ChiefSessionCreator tells the hook), and trains.
    chief.session = chief.new_session()
    assert chief.session.run(chief.built["global_step"]) == 0
    assert all(worker.thread.is_alive() and not worker.tokens for worker in others)
    chief.session.run(chief.initialize_locals)
    chief.hook.chief_joined()
    chief.hook.after_create_session(chief.session, None)
    assert all(worker.thread.is_alive() and not worker.tokens for worker in others)
    first_step = chief.hook.before_run(None)  # what MonitoredSession adds to the first step
    assert chief.session.run(first_step.fetches)[1] == 0  # the tokens' global step
    chief.steps_in_a_thread(until=5)
    for worker in [chief] + others:
        worker.thread.join(60)
    chief.hook.stop()
    for thread in chief.hook.threads:
        thread.join(60)
    assert not any(worker.thread.is_alive() for worker in [chief] + others), \
        "still waiting for a token: %s" % [worker.tokens for worker in [chief] + others]
    assert [worker.error for worker in [chief] + others] == [None] * 3
    assert chief.failures == [] and not any(t.is_alive() for t in chief.hook.threads)
    assert [worker.tokens[0] for worker in others] == [0, 0], "the chief's release tokens"
    assert chief.session.run(chief.built["global_step"]) == 5
    assert all(worker.tokens[-1] == 5 for worker in [chief] + others)
    # every token was taken: M - 1 released, then M per update, one per step
    assert chief.session.run(chief.tokens_left) == 0
    assert sum(map(len, (worker.tokens for worker in [chief] + others))) == 2 + 3 * 5


@pytest.mark.tf2
def test_a_token_asked_for_late_goes_to_a_faster_worker_whose_gradient_then_counts_twice():
    """What assert_updates_are_means_of_fresh_contributions allows for, step by step, with
    N = M = 2: worker1's step sends its gradient, but its request for a token comes late (here
    it is run on its own, afterwards). Meanwhile the chief takes its token of update 1, makes a
    whole step and takes worker1's, so update 2 averages two gradients of the chief's."""
    module = load_example(SSGD)
    tf, hosts = module.tf, ["localhost:%d" % port for port in free_ports(3)]
    argv = ["--ps_hosts", hosts[0], "--worker_hosts", ",".join(hosts[1:]), "--train_steps", "2",
            "--timeout", "30"]
    flags = [module.parse_flags(["--job_name", "worker", "--task_index", str(index)] + argv)
             for index in range(2)]
    spec = tf.train.ClusterSpec(flags[0].cluster)
    SERVERS.append(tf.train.Server(spec, job_name="ps", task_index=0))
    SERVERS.extend(tf.train.Server(spec, job_name="worker", task_index=index)
                   for index in range(2))
    chief, late = [InProcessWorker(module, flags[index], SERVERS[index - 2]) for index in range(2)]
    chief.session.run(chief.initialize_theta)
    for worker in (chief, late):
        worker.session.run(worker.initialize_locals)
        worker.session.run(worker.hook.init_op)
    # The step's two halves: the gradient into the accumulators, then the token (train_op is
    # the local step assigned from the token, which waits for the gradient).
    token = late.built["train_op"].op.inputs[1]
    assert token.op.type.startswith("QueueDequeue")
    with late.graph.as_default():
        optimizer = late.built["optimizer"]
        ask_for_a_token = optimizer._local_step.assign(optimizer._sync_token_queue.dequeue())
    late.session.run(token.op.control_inputs)  # worker1's gradient of step 0
    chief.hook.after_create_session(chief.session, None)  # the chief's aggregation starts
    timeout = tf.RunOptions(timeout_in_ms=30000)
    taken = [chief.session.run(chief.built["train_op"], options=timeout) for _ in range(3)]
    assert taken == [1, 1, 2], "the chief took both tokens of update 1, then one of update 2"
    assert late.session.run(ask_for_a_token, options=timeout) == 2
    assert chief.session.run(chief.built["global_step"]) == 2
    assert chief.session.run(chief.tokens_left) == 0
    chief.hook.end(chief.session)  # (joins its aggregation, which ended at update 2)
    assert not any(thread.is_alive() for thread in chief.hook.threads) and not chief.failures


# A "chief" process whose loop on the ps takes one gradient per iteration from an accumulator
# there (as the chief's aggregation loop does), or, with role "ps", the ps.
TAKER = """
import sys
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()
role, ps, worker = sys.argv[1:4]
cluster = tf.train.ClusterSpec({"ps": [ps], "worker": [worker]})
if role == "ps":
    tf.train.Server(cluster, job_name="ps", task_index=0).join()
server = tf.train.Server(cluster, job_name="worker", task_index=0)
with tf.device("/job:ps/task:0"):
    accumulator = tf.ConditionalAccumulator(tf.float32, shape=[], shared_name="accumulator")
    loop = tf.while_loop(lambda taken: taken < 10 ** 6, lambda taken: taken + tf.cast(
        accumulator.take_grad(1) * 0 + 1, tf.int32), [0])
with tf.Session(server.target, config=tf.ConfigProto(
        device_filters=["/job:ps", "/job:worker/task:0"])) as session:
    session.run(loop)
"""


@pytest.mark.tf2
def test_a_killed_chief_s_loop_on_the_ps_is_cancelled_with_it():
    """What a restarted chief relies on (the aggregation loop of its old self must not take the
    gradients meant for its own): while the chief process lives, its loop on the ps takes every
    gradient sent to the accumulator; once the process is killed, the ps cancels its step (gRPC
    tells the ps that the caller is gone), and the next gradient stays for whoever takes it."""
    tf = load_example(SSGD).tf
    ps, worker = ("localhost:%d" % port for port in free_ports(2))
    tasks = {role: subprocess.Popen([sys.executable, "-c", TAKER, role, ps, worker],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True) for role in ("ps", "chief")}
    try:
        assert wait_until(lambda: listening(ps), 60), "the ps did not start"
        with tf.Graph().as_default():
            with tf.device("/job:ps/task:0"):
                accumulator = tf.ConditionalAccumulator(tf.float32, shape=[],
                                                        shared_name="accumulator")
                send = accumulator.apply_grad(7.0, local_step=2 ** 40)  # never stale
                waiting, take = accumulator.num_accumulated(), accumulator.take_grad(1)
            with tf.Session("grpc://" + ps, config=tf.ConfigProto(
                    device_filters=["/job:ps"], operation_timeout_in_ms=30000)) as session:
                for _ in range(2):  # the chief's loop takes them: it is running
                    session.run(send)
                    assert wait_until(lambda: session.run(waiting) == 0, 60), "not taken"
                os.killpg(tasks["chief"].pid, signal.SIGKILL)
                tasks["chief"].wait(60)
                session.run(send)
                assert session.run(take) == 7.0  # (a live loop of the dead chief would take it)
    finally:
        for task in tasks.values():
            if task.poll() is None:
                os.killpg(task.pid, signal.SIGKILL)
                task.wait(60)


# ---------------------------------------------------------------------------------------------
# Flags of the synchronous family.
# ---------------------------------------------------------------------------------------------
BAD_FLAGS = [
    (SSGD, ["--replicas_to_aggregate", "3"], "between 1 and the number of workers (2)"),
    (SSGD, ["--replicas_to_aggregate", "0"], "between 1 and the number of workers (2)"),
    (SAGN, ["--replicas_to_aggregate", "-1"], "between 1 and the number of workers (2)"),
    (SAGN, ["--window", "0"], "--window must be at least 1"),
    (RATES, ["--learning_rates", "0.1"], "1 rate(s) for 2 workers"),
    (RATES, ["--learning_rates", "0.1,0.2,0.3"], "3 rate(s) for 2 workers"),
    (RATES, ["--learning_rates", "0.1,fast"], "not a comma-separated list of numbers"),
    (RATES, ["--learning_rates", "0.1,-0.2"], "must all be positive"),
]


@pytest.mark.parametrize("script, argv, expected", BAD_FLAGS)
def test_bad_synchronous_flags_get_one_line_and_exit_2(script, argv, expected, capsys):
    module = load_example(script)
    ps, worker0, worker1 = ("localhost:%d" % port for port in free_ports(3))
    with pytest.raises(SystemExit) as exit_info:
        module.parse_flags(["--ps_hosts", ps, "--worker_hosts", "%s,%s" % (worker0, worker1)]
                           + argv)
    error = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(error.strip().splitlines()) == 1 and expected in error, error


def test_replicas_and_learning_rates_default_to_every_worker():
    module = load_example(RATES)
    ps, worker0, worker1 = ("localhost:%d" % port for port in free_ports(3))
    args = module.parse_flags(["--ps_hosts", ps, "--worker_hosts", "%s,%s" % (worker0, worker1),
                               "--learning_rate", "0.3"])
    assert args.replicas_to_aggregate == 2
    assert args.learning_rates == [0.3, 0.3]
