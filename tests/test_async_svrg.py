"""Async-SVRG/: asynchronous SVRG on a parameter server, in epochs (Zhang, Zheng, Kwok 2016).

The run.sh and fault tests are real clusters on free localhost ports. The exact-update test
builds the script's graph in this process and runs it on tf.train.Servers (a ps and two
workers) started here: it takes each epoch's steps by hand, fetches every minibatch, and
recomputes with NumPy the snapshot θ̃, the full gradient μ at θ̃ and every corrected update.
"""
import copy
import re
import signal
import threading

import numpy as np
import pytest

from helpers import (LocalCluster, assert_no_process_left, example, load_example, output,
                     rejected, results_in, run_sh)
from test_asynchronous import assert_close, cluster_flags, in_process_cluster, worker_args
from test_fidelity import ancestors
from test_synchronous import gradient

SVRG = "Async-SVRG/Async-SVRG.py"
NAMES = ["hidden_weights", "hidden_biases", "output_weights", "output_biases"]


@pytest.mark.tf2
def test_run_sh_reaches_accuracy_with_epochs_of_m_global_steps():
    """`bash run.sh` with its defaults: one ps, two workers, 1,000 global steps in epochs of
    200; the global step counts every worker's update, as in Hogwild."""
    text = run_sh("Async-SVRG/Async-SVRG.py")
    results = sorted(results_in(text), key=lambda r: r["task_index"])
    assert [r["task_index"] for r in results] == [0, 1], text
    assert all(r["test_accuracy"] >= 0.93 for r in results), results
    assert max(r["global_step"] for r in results) == sum(r["local_steps"] for r in results)
    assert 1000 <= max(r["global_step"] for r in results) < 1000 + 2
    # Each worker started every epoch it stepped in (5 of 200 steps), none more.
    assert all(1 <= r["epochs"] <= 5 for r in results) and max(
        r["epochs"] for r in results) == 5, results
    assert "[ps0] all 2 workers are done" in text and "async_svrg: 2 worker(s)" in text


def within(seconds, function, *args):
    """function(*args), which must return within `seconds` (a thread, so that a wait that
    never ends fails the test instead of hanging it)."""
    done = []
    thread = threading.Thread(target=lambda: done.append(function(*args)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert done, "%s did not return within %g s" % (function.__name__, seconds)
    return done[0]


def full_gradient(theta, images, labels):
    return gradient(theta, images.astype(np.float64), labels)


def flat(values):
    return np.concatenate([np.asarray(v, np.float64).ravel() for v in values])


def corrected_step(worker, rate, snapshot, mu):
    """One update by `worker`: θ before and after it, against NumPy's
    θ − η·(∇fᵢ(θ) − ∇fᵢ(θ̃) + μ) on the minibatch i that the step drew."""
    before = [v.astype(np.float64) for v in worker.theta()]
    _, images, labels = worker.run("train_op", "train_op", "images", "labels")
    images = images.astype(np.float64)
    at_theta, at_snapshot = gradient(before, images, labels), gradient(snapshot, images, labels)
    mus = np.split(mu, np.cumsum([v.size for v in before])[:-1])
    expected = [v - rate * (g - g_tilde + m.reshape(v.shape))
                for v, g, g_tilde, m in zip(before, at_theta, at_snapshot, mus)]
    assert_close(worker.theta(), expected)
    plain_sgd = [v - rate * g for v, g in zip(before, at_theta)]
    assert np.abs(flat(expected) - flat(plain_sgd)).max() > 1e-4  # the correction shows


@pytest.mark.tf2
def test_snapshot_full_gradient_and_every_corrected_update_are_exact():
    """Two workers, epochs of 3 global steps. Epoch 0: the chief takes θ̃ = θ₀, each worker
    gives its shard's gradient, both pull μ = (1/n)·Σⱼ ∇fⱼ(θ₀); three updates, interleaved,
    each θ − η·(∇fᵢ(θ) − ∇fᵢ(θ̃) + μ). Epoch 1: θ̃ = θ after the third update; worker 1 is
    silent, so the chief (wait 0) computes its shard too: μ is exact all the same."""
    rate = 0.3
    module, args, (chief, other) = in_process_cluster(SVRG, 2, [
        "--epoch_steps", "3", "--learning_rate", str(rate)])
    other_args = copy.copy(args)
    other_args.task_index = 1
    net = module.Model(args)
    images, labels = net.train_images, net.train_labels
    chief.initialize(chief=True)
    other.initialize(chief=False)
    initial = [v.astype(np.float64) for v in chief.theta()]

    # Epoch 0, by hand: the snapshot, each worker's own shard, then each pulls θ̃ and μ.
    assert chief.session.run(chief.built["new_epoch"]) == 0
    chief.session.run(chief.built["contribute"])
    epoch, tags = other.session.run(other.built["epochs"])
    assert epoch == 0 and list(tags) == [0, -1]
    assert not chief.session.run(chief.built["pulled"])  # worker 1's part is missing
    # A session made now (worker 1's first, or one re-created) pulls an incomplete μ, and knows:
    # its epoch stays -1, so that it gives its part before it steps.
    other.session.run(other.local_init)
    assert other.session.run(other.built["epoch_here"]) == -1
    other.session.run(other.built["contribute"])
    for worker in (chief, other):
        assert worker.session.run(worker.built["pulled"])
        assert worker.session.run(worker.built["epoch_here"]) == 0
        assert_close(worker.session.run(worker.built["snapshot_here"]), initial)
        np.testing.assert_allclose(worker.session.run(worker.built["mu_here"]),
                                   flat(full_gradient(initial, images, labels)),
                                   rtol=1e-4, atol=1e-6)
    mu = flat(full_gradient(initial, images, labels))
    for worker in (chief, other, other):
        corrected_step(worker, rate, initial, mu)
    assert chief.session.run(chief.built["global_step"]) == 3

    # Epoch 1: the chief takes θ̃ ← θ, gives its shard, and with no wait computes worker 1's.
    snapshot = [v.astype(np.float64) for v in chief.theta()]
    assert within(60, module.start_epoch, args, chief.session, chief.built, 0.0) == [1]
    mu = flat(full_gradient(snapshot, images, labels))
    assert_close(chief.session.run(chief.built["snapshot"]), snapshot)
    np.testing.assert_allclose(chief.session.run(chief.built["mu_here"]), mu, rtol=1e-4,
                               atol=1e-6)
    assert within(60, module.start_epoch, other_args, other.session, other.built, 60.0) == []
    assert other.session.run(other.built["epoch_here"]) == 1
    np.testing.assert_allclose(other.session.run(other.built["mu_here"]), mu, rtol=1e-4,
                               atol=1e-6)
    for worker in (other, chief):
        corrected_step(worker, rate, snapshot, mu)


@pytest.mark.tf2
def test_theta_and_the_epochs_state_live_on_the_ps_the_copies_and_passes_on_the_worker():
    """θ, θ̃, the shards' gradients and the epochs on the ps; this worker's θ̃ and μ local; θ's
    update lock-free on the ps, the step counter's locked; the critical section on the ps, and
    the lock taken only once a shard's gradient has reached the ps."""
    module = load_example(SVRG)
    tf, worker = module.tf, "/job:worker/task:1"
    args = worker_args(module, cluster_flags(2), 1)
    with tf.Graph().as_default() as graph:
        built = module.build_graph(args)
        shared = {v.op.name: v.device for v in tf.global_variables()}
        assert sorted(shared) == sorted(NAMES + ["snapshot/" + n for n in NAMES] + [
            "global_step", "snapshot_epoch", "shard_gradients", "shard_epochs"])
        assert set(shared.values()) == {"/job:ps/task:0"}
        local = {v.op.name: v.device for v in tf.local_variables()}
        assert sorted(local) == sorted(["snapshot_here/" + n for n in NAMES] + [
            "mu_here", "epoch_here"])
        assert set(local.values()) == {worker}
        operations = graph.get_operations()
        gradient_ops = [op for op in operations if op.name.startswith("gradients")]
        assert gradient_ops and all(op.device == worker for op in gradient_ops)
        applies = [op for op in operations if op.type == "ApplyGradientDescent"]
        assert len(applies) == 4 and all(op.device == "/job:ps/task:0" for op in applies)
        assert not any(op.get_attr("use_locking") for op in applies)
        [increment] = [op for op in operations if op.type == "AssignAdd"
                       and op.inputs[0].op.name == "global_step"]
        assert increment.get_attr("use_locking")
        locks = [op for op in operations if op.type == "MutexLock"]
        assert len(locks) == 3 and all(op.device == "/job:ps/task:0" for op in locks)
        scope = built["contribute"].name.split("/")[0]  # (the critical section's execution)
        [contribute_lock] = [op for op in locks if op.name.startswith(scope + "/")]
        assert any(name.startswith("gradients") for name in ancestors(contribute_lock))


def test_an_epoch_length_below_1_gets_one_line_and_exit_2(capsys):
    assert "--epoch_steps must be at least 1" in rejected(
        load_example(SVRG), cluster_flags(2) + ["--epoch_steps", "0"], capsys)


def test_a_killed_worker_delays_an_epoch_and_the_other_finishes_as_in_hogwild():
    """Hogwild's fault behaviour: worker1 SIGKILLed mid-run, worker0 finishes training (it
    computes the dead worker's shard gradient at each later epoch, after --timeout / 4 s), and
    the ps names worker1, exiting 1."""
    cluster = LocalCluster(example(SVRG), workers=2, echo=False, args=[
        "--train_steps", "600", "--epoch_steps", "100", "--log_every", "50", "--timeout", "8",
        "--step_delay", "0.02"])
    try:
        cluster.start()
        assert cluster.wait_for_line("worker1", r"step 50 ", 120), output(cluster)
        cluster.kill("worker1")
        assert cluster.wait(120, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert cluster.returncodes() == {"ps0": 1, "worker0": 0, "worker1": -signal.SIGKILL}, (
        output(cluster))
    result = cluster.task("worker0").result()
    assert result["global_step"] >= 600 and result["test_accuracy"] >= 0.9, result
    assert result["shards_taken_over"] >= 1, result
    assert re.search(r"worker1 \(\S+\) stopped without finishing", output(cluster, "ps0"))
    assert "shard gradients of workers silent for 2 s" in output(cluster, "worker0")
