"""Local-SGD/ (model averaging, federated averaging): rounds of H local steps, then the ps sets
θ ← Σₖ (nₖ/n)·θₖ synchronously.

The exact-update test runs three workers on the non-IID split (--non_iid), whose shards have
different sizes (566, 424 and 447 of the 1,437 training images with seed 0), so that a plain
mean of the θₖ, or any weighting other than nₖ/n, fails it. Minibatches are smaller than a
shard, so the test reads the minibatches each worker drew from the script's own input pipeline,
built in this process with the worker's own flags, and recomputes every local step with NumPy.
"""
import os

import numpy as np
import pytest

from helpers import (data_and_initial_theta, free_ports, load_example, output, run_cluster,
                    worker_results)
from test_synchronous import assert_parameters_close, gradient, ps_says_all_done

LOCAL_SGD = "Local-SGD/Local-SGD.py"
NAMES = ["hidden_weights", "hidden_biases", "output_weights", "output_biases"]


def flags(module, workers, task_index=0, extra=()):
    hosts = ["localhost:%d" % port for port in free_ports(workers + 1)]
    return module.parse_flags(["--job_name", "worker", "--task_index", str(task_index),
                               "--ps_hosts", hosts[0], "--worker_hosts", ",".join(hosts[1:])]
                              + list(extra))


# ---------------------------------------------------------------------------------------------
# Defaults: accuracy, rounds and local steps.
# ---------------------------------------------------------------------------------------------
@pytest.mark.tf2
def test_local_sgd_reaches_accuracy_with_h_local_steps_per_round():
    cluster = run_cluster(LOCAL_SGD, workers=2)
    results = worker_results(cluster)
    assert all(r["test_accuracy"] >= 0.93 for r in results), results
    rounds, window = 100, 10  # the defaults: --train_steps 100 --window 10
    assert [r["global_step"] for r in results] == [rounds] * 2
    assert [r["local_steps"] for r in results] == [window * rounds] * 2
    # The IID split: every other example, 719 and 718 of 1,437; the weights sum to 1.
    assert [r["shard_weight"] for r in results] == [round(719 / 1437, 6), round(718 / 1437, 6)]
    assert all(r["shard_classes"] == list(range(10)) for r in results)
    assert ps_says_all_done(cluster, 2)
    assert "[worker1] shard: IID, classes 0,1,2,3,4,5,6,7,8,9, nₖ/n = 0.4997" in output(
        cluster, "worker1")


# ---------------------------------------------------------------------------------------------
# The exact update: two rounds, unequal shards.
# ---------------------------------------------------------------------------------------------
def minibatches_of(module, args, count):
    """The first `count` minibatches that worker args.task_index trains on, from the script's own
    data, shard and input pipeline (Model seeds the graph, and so the shuffling)."""
    tf = module.tf
    with tf.Graph().as_default():
        net = module.Model(args)
        shard_images, shard_labels = module.shard(args, net.train_images, net.train_labels)
        batch = module.worker_iterator(shard_images, shard_labels, 0, 1, args.batch_size,
                                       args.seed + args.task_index).get_next()
        with tf.Session() as sess:
            drawn = [sess.run(batch) for _ in range(count)]
    return len(shard_labels), [(x.astype(np.float64), y) for x, y in drawn]


@pytest.mark.tf2
def test_one_round_sets_theta_to_the_shard_size_weighted_average_of_the_local_copies(tmp_path):
    """Two rounds: the second one shows that every worker started it from the same new θ."""
    workers, window, rate, rounds = 3, 3, 0.5, 2
    extra = ["--non_iid", "--window", str(window), "--learning_rate", str(rate),
             "--batch_size", "64"]
    module = load_example(LOCAL_SGD)
    sizes, batches = zip(*(minibatches_of(module, flags(module, workers, k, extra),
                                          rounds * window + 1) for k in range(workers)))
    batches = [drawn[:-1] for drawn in batches]  # (one more than the run trains on)
    assert sum(sizes) == 1437 and len(set(sizes)) == workers, sizes  # unequal shards
    weights = [size / 1437.0 for size in sizes]

    log_dir = str(tmp_path / "logs")
    cluster = run_cluster(LOCAL_SGD, workers=workers, args=extra + [
        "--train_steps", str(rounds), "--log_dir", log_dir, "--checkpoint_every", "1"])
    results = worker_results(cluster)
    assert [(r["global_step"], r["local_steps"]) for r in results] == [
        (rounds, rounds * window)] * workers
    assert [r["shard_weight"] for r in results] == [round(w, 6) for w in weights]
    assert ps_says_all_done(cluster, workers)
    thetas = []
    for step in range(rounds + 1):
        reader = module.tf.train.load_checkpoint(os.path.join(log_dir, "model.ckpt-%d" % step))
        assert reader.get_tensor("global_step") == step
        thetas.append([reader.get_tensor(name).astype(np.float64) for name in NAMES])

    initial = data_and_initial_theta(module)[1]
    assert_parameters_close(thetas[0], initial, [value + 1 for value in initial])
    for number, (before, after) in enumerate(zip(thetas, thetas[1:])):
        local_copies = []
        for drawn in batches:
            local = [value.copy() for value in before]
            for images, labels in drawn[number * window:(number + 1) * window]:
                local = [value - rate * part
                         for value, part in zip(local, gradient(local, images, labels))]
            local_copies.append(local)
        expected = [sum(w * copy[i] for w, copy in zip(weights, local_copies))
                    for i in range(len(before))]
        assert_parameters_close(after, expected, before)
        # A plain mean of the θₖ is measurably different: the weighting is what is tested.
        mean = [np.mean([copy[i] for copy in local_copies], axis=0) for i in range(len(before))]
        assert max(np.abs(m - e).max() for m, e in zip(mean, expected)) > 1e-3


# ---------------------------------------------------------------------------------------------
# Shards, placement, flags: in this process, no cluster.
# ---------------------------------------------------------------------------------------------
def test_non_iid_shards_split_the_training_set_by_label_and_iid_ones_every_mth_example():
    module = load_example(LOCAL_SGD)
    (images, labels), _ = data_and_initial_theta(module, 0)[0]
    for workers in (2, 3, 5, 10):
        shards = [module.shard(flags(module, workers, k, ["--non_iid"]), images, labels)
                  for k in range(workers)]
        classes = [set(shard_labels.tolist()) for _, shard_labels in shards]
        assert sorted(c for group in classes for c in group) == list(range(10))  # disjoint
        assert max(map(len, classes)) - min(map(len, classes)) <= 1
        assert sum(len(shard_labels) for _, shard_labels in shards) == len(labels)
        for (shard_images, shard_labels), group in zip(shards, classes):
            mine = np.isin(labels, sorted(group))
            np.testing.assert_array_equal(shard_images, images[mine])  # all of its classes
    again = module.shard(flags(module, 3, 1, ["--non_iid"]), images, labels)[1]
    other_seed = module.shard(flags(module, 3, 1, ["--non_iid", "--seed", "1"]), images,
                              labels)[1]
    assert set(again.tolist()) == {1, 6, 7} != set(other_seed.tolist())  # seeded
    iid = module.shard(flags(module, 3, 2), images, labels)
    np.testing.assert_array_equal(iid[1], labels[2::3])


def test_the_local_copy_is_in_local_variables_on_the_worker_and_theta_on_the_ps():
    module = load_example(LOCAL_SGD)
    args = flags(module, 2, 1, ["--non_iid"])
    tf = module.tf
    with tf.Graph().as_default():
        built = module.build_graph(args)
        built["optimizer"].ready_for_local_init_op.mark_used()  # used by the session hook
        global_variables = tf.global_variables()
        assert len(global_variables) == 5  # θ and the global step, nothing of the workers'
        assert all(v.device == "/job:ps/task:0" for v in global_variables)
        local_variables = [v for v in tf.local_variables() if v.op.name.startswith(
            ("local/", "round_start/"))]
        assert {v.op.name for v in built["local_params"]} <= {v.op.name
                                                               for v in local_variables}
        assert len(local_variables) == 8  # θₖ and the θ its round started from
        assert all(v.device == "/job:worker/task:1" for v in local_variables)
        assert built["weight"] == pytest.approx(724 / 1437.0)


BAD_FLAGS = [
    (2, ["--replicas_to_aggregate", "1"], "must be every worker (2)"),
    (2, ["--replicas_to_aggregate", "3"], "between 1 and the number of workers (2)"),
    (2, ["--window", "0"], "--window must be at least 1"),
    (11, ["--non_iid"], "at most 10 workers, got 11"),
]


@pytest.mark.parametrize("workers, argv, expected", BAD_FLAGS)
def test_bad_local_sgd_flags_get_one_line_and_exit_2(workers, argv, expected, capsys):
    module = load_example(LOCAL_SGD)
    with pytest.raises(SystemExit) as exit_info:
        flags(module, workers, 0, argv)
    error = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(error.strip().splitlines()) == 1 and expected in error, error
