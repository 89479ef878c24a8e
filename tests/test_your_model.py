"""Your model, your data: the slot every example has (load_data, model), tried as a user would.

A small CNN written with tf.layers (convolution, pooling, dense) replaces the default model in a
copy of each example, and trains to the accuracy bar; models and data that cannot work end every
task with one line and exit code 2 before any server starts."""
import os
import re
import sys

import pytest

from helpers import (LocalCluster, example, free_ports, has_parameter_servers, load_example, output,
                     results_in, run_cluster, run_script, tf_major_version, worker_results)

EXAMPLES = ["Non-Distributed_Setup.py", "Distributed-Setup/dist_setup.py",
            "Distributed-Setup/dist_setup_sup.py", "Hogwild/Hogwild.py",
            "Multiple-GPUs-Single-Machine/dist_mult_gpu_sing_mach.py", "Synchronous-SGD/ssgd.py",
            "Synchronous-SGD-different-learning-rates/ssgd.py", "SAGN/SAGN.py",
            "Local-SGD/Local-SGD.py", "DOWNPOUR/DOWNPOUR.py", "DOWNPOUR-Easy/DOWNPOUR.py",
            "AGN/AGN.py", "AEASGD/AEASGD.py", "EAMSGD/EAMSGD.py", "DynSGD/DynSGD.py",
            "Staleness-Aware-SGD/Staleness-Aware-SGD.py", "AllReduce-SGD/AllReduce-SGD.py",
            "Gossip-SGD/Gossip-SGD.py", "AD-PSGD/AD-PSGD.py", "Pipe-SGD/Pipe-SGD.py",
            "Async-SVRG/Async-SVRG.py", "Sync-Switch/Sync-Switch.py"]

CNN = '''def model(images, classes):
    """A small convolutional network on the 8×8 digits."""
    pixels = tf.reshape(images, [-1, 8, 8, 1])
    features = tf.layers.conv2d(pixels, 16, 3, padding="same", activation=tf.nn.relu)
    features = tf.layers.max_pooling2d(features, 2, 2)
    return tf.layers.dense(tf.layers.flatten(features), classes)
'''


def test_the_cnn_is_tried_in_every_example():
    """A new example cannot miss the proof that any TF1 model works in it."""
    import shared_helpers  # (tools/, which helpers put on the path)
    found = sorted(os.path.relpath(path, shared_helpers.ROOT)
                   for path in shared_helpers.example_scripts())
    assert sorted(EXAMPLES) == found

# Where the defaults, tuned for the MLP, leave the CNN short of the bar. DOWNPOUR-Easy's plain
# SGD at 1000 global steps ended at 0.90-0.96 in 4 runs (a CI run: below 0.9), DOWNPOUR's Adagrad
# and AGN at 0.97; at 2000 steps 0.956-0.983 in 4. (A smaller rate, 0.025: 0.90-0.94.)
CNN_FLAGS = {"DOWNPOUR-Easy/DOWNPOUR.py": ["--train_steps", "2000"]}


def with_definition(source, definition):
    """source with its top-level function of the same name as definition's replaced by it."""
    name = re.match(r"def (\w+)\(", definition).group(1)
    found = re.search(r"^def %s\(.*?(?=^\S)" % name, source, re.MULTILINE | re.DOTALL)
    assert found, name
    return source[:found.start()] + definition + "\n\n" + source[found.end():]


def user_copy(tmp_path, script, *definitions):
    """A copy of an example, alone in a folder of its own, with the user's definitions in it."""
    source = open(example(script)).read()
    for definition in definitions:
        source = with_definition(source, definition)
    path = tmp_path / os.path.basename(script)
    path.write_text(source)
    return str(path)


@pytest.mark.skipif(tf_major_version() > 1, reason="tf.compat.v1.layers needs Keras 2, which "
                    "TensorFlow 2.16+ does not ship (the default model needs no layers)")
@pytest.mark.parametrize("script", EXAMPLES)
def test_a_tf_layers_cnn_in_the_slot_trains_to_the_accuracy_bar(script, tmp_path):
    copy = user_copy(tmp_path, script, CNN)
    if script == "Non-Distributed_Setup.py":
        code, text = run_script([sys.executable, copy])
        assert code == 0, text
        results = results_in(text)
    else:
        results = worker_results(run_cluster(copy, workers=2, args=CNN_FLAGS.get(script, [])))
    assert results and all(r["test_accuracy"] >= 0.9 for r in results), results


BAD_MODELS = {
    "a variable without a gradient": ('''def model(images, classes):
    unused = tf.get_variable("unused_scale", [3])
    return tf.layers.dense(images, classes)
''', "get no gradient: unused_scale"),
    "logits narrower than the labels": ('''def model(images, classes):
    return tf.layers.dense(images, 5)
''', "returns 5 logits per image for 10 classes"),
    "inputs of another shape": ('''def model(images, classes):
    return tf.layers.dense(tf.reshape(images, [-1, 7, 7, 1]), classes)
''', "model(images of shape (None, 64), 10 classes) failed"),
    "state that is not trained": ('''def model(images, classes):
    hidden = tf.layers.batch_normalization(tf.layers.dense(images, 32), training=True)
    return tf.layers.dense(tf.nn.relu(hidden), classes)
''', "not a trained parameter"),
    "tf.keras layers": ('''def model(images, classes):
    return tf.keras.layers.Dense(classes)(tf.keras.layers.Dense(32)(images))
''', "makes variables that tf.get_variable did not make (dense/bias, dense/kernel, dense_1"),
}
BAD_DATA = {
    "no training examples": ('''def load_data(args):
    return (np.zeros((0, 64)), np.zeros(0)), (np.ones((5, 64)), np.arange(5))
''', "0 training examples"),
    "fewer examples than workers": ('''def load_data(args):
    return (np.ones((1, 64)), np.zeros(1)), (np.ones((5, 64)), np.arange(5))
''', "1 training examples (1 labels) for 2 workers"),
    "images of two shapes": ('''def load_data(args):
    return (np.ones((50, 64)), np.arange(50) % 10), (np.ones((5, 8, 8)), np.arange(5))
''', "training images of shape (64,), test images of shape (8, 8)"),
}


def assert_every_task_refused(copy, expected, args=()):
    """Every task (ps and workers) ends with exit code 2 and one error line saying expected."""
    cluster = LocalCluster(copy, workers=2, args=list(args), echo=False)
    try:
        cluster.start()
        assert cluster.wait(60, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert set(cluster.returncodes().values()) == {2}, output(cluster)
    for task in cluster.tasks:
        errors = [line for line in task.lines if "error:" in line]
        assert len(errors) == 1 and expected in errors[0], (task.name, output(cluster))


WITH_TF_LAYERS = pytest.mark.skipif(tf_major_version() > 1, reason="written with tf.layers")


@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.tf2 if "keras" in case
                                               else WITH_TF_LAYERS) for case in sorted(BAD_MODELS)])
def test_a_model_that_cannot_train_is_refused_by_every_task_in_one_line(case, tmp_path):
    definition, expected = BAD_MODELS[case]
    assert_every_task_refused(user_copy(tmp_path, "Hogwild/Hogwild.py", definition), expected)


@pytest.mark.tf2
@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_data_that_cannot_train_is_refused_by_every_task_in_one_line(case, tmp_path):
    definition, expected = BAD_DATA[case]
    script = "Synchronous-SGD/ssgd.py" if "shape" in case else "AGN/AGN.py"
    assert_every_task_refused(user_copy(tmp_path, script, definition), expected)


@pytest.mark.skipif(tf_major_version() > 1, reason="the CNN is written with tf.layers")
def test_a_log_dir_of_another_model_is_refused_by_every_task_naming_the_variables(tmp_path):
    log_dir = str(tmp_path / "logs")
    run_cluster("Hogwild/Hogwild.py", args=["--train_steps", "20", "--log_dir", log_dir])
    copy = user_copy(tmp_path, "Hogwild/Hogwild.py", CNN)
    assert_every_task_refused(copy, "holds a checkpoint of another model: conv2d/kernel",
                              ["--log_dir", log_dir])


@pytest.mark.tf2
@pytest.mark.parametrize("script", EXAMPLES[1:])  # (every one with a build_graph)
def test_the_data_are_handed_over_to_the_graph_not_held_in_it(script):
    """TensorFlow copies a graph's constants several times (a 256 MB training set took a
    worker 4 GB) and caps them at 2 GB, so the training shard and the test set are not among
    them: 50 times the data leaves the graph as it was."""
    import numpy as np
    module = load_example(script)
    tf, sizes = module.tf, []
    for rows in (200, 10000):  # 10,000 rows of 64 floats: 2.5 MB, twice (training and test)
        module.load_data = lambda args, rows=rows: (
            (np.ones((rows, 64), np.float32), np.arange(rows) % 10),
            (np.ones((rows, 64), np.float32), np.arange(rows) % 10))
        args = module.parse_flags(["--job_name", "worker", "--task_index", "0", "--worker_hosts",
                                   "localhost:%d,localhost:%d" % tuple(free_ports(2))]
                                  + (["--ps_hosts", "localhost:%d" % free_ports(1)[0]]
                                     if has_parameter_servers(script) else []))
        with tf.Graph().as_default() as graph:
            module.build_graph(args)
            sizes.append(graph.as_graph_def().ByteSize())
    assert sizes[1] - sizes[0] < 2 ** 16, sizes


def test_data_larger_than_the_log_dir_s_free_space_still_train_with_checkpoints(small_disk,
                                                                               tmp_path):
    """The checkpoints hold θ and the graph, not the data: 8 MB of data with 6 MiB free."""
    (small_disk / "filler").write_bytes(b"x" * (10 * 2 ** 20))
    copy = user_copy(tmp_path, "Hogwild/Hogwild.py", '''def load_data(args):
    from sklearn.datasets import load_digits
    images, labels = load_digits(return_X_y=True)
    images = np.tile(images / 16.0, (23, 1))  # 8 MB of float32
    labels = np.tile(labels, 23)
    return (images[:-360], labels[:-360]), (images[-360:], labels[-360:])
''')
    cluster = run_cluster(copy, workers=1, args=["--log_dir", str(small_disk / "run"),
                                                  "--train_steps", "200", "--checkpoint_every",
                                                  "100"])
    assert worker_results(cluster)[0]["global_step"] == 200
    assert os.path.exists(str(small_disk / "run" / "model.ckpt-200.index")), output(cluster)


def test_every_task_loads_the_data_once(tmp_path):
    """The check before the servers start and the graph share one load_data(args): a user's
    data set is read once per task, not twice."""
    counted = user_copy(tmp_path, "Hogwild/Hogwild.py", '''def load_data(args):
    print("load_data(args) called", flush=True)
    from sklearn.datasets import load_digits
    images, labels = load_digits(return_X_y=True)
    return (images[:1400] / 16.0, labels[:1400]), (images[1400:] / 16.0, labels[1400:])
''')
    cluster = run_cluster(counted, args=["--train_steps", "20"])
    for task in cluster.tasks:
        assert output(cluster, task.name).count("load_data(args) called") == 1, output(cluster)


def test_the_default_split_is_a_fifth_for_testing_and_the_classes_come_from_the_labels():
    module = load_example("Hogwild/Hogwild.py")
    args = module.parse_flags(["--job_name", "worker", "--task_index", "0"])
    net = module.Model(args)
    assert (len(net.train_images), len(net.test_images)) == (1437, 360)
    assert net.classes == 10 and net.train_images.shape[1:] == (64,)


def test_the_readme_shows_the_cnn_as_its_diff_against_the_shipped_model():
    import difflib
    from shared_helpers import definitions
    shipped = definitions(open(example("Hogwild/Hogwild.py")).read())["model"]
    diff = list(difflib.unified_diff(shipped.splitlines(), CNN.rstrip("\n").splitlines(),
                                     lineterm="", n=1))[2:]
    readme = open(example("README.md")).read()
    shown = re.search(r"byom-diff.*?```diff\n(.*?)\n```", readme, re.S).group(1)
    assert shown.splitlines() == diff
