"""Non-distributed baseline: the same model, data and SGD in one process, θ on the local CPU.

Every distributed example in this collection trains the same network (64→128→10, ReLU, softmax
cross-entropy) on the same digits, from the same seeded θ. This script trains it without any
cluster, so that its accuracy and its time to accuracy are the reference every speed-up is
measured against:

    θ ← θ − η·g        (one minibatch of --batch_size examples per step)

Run it:   python Non-Distributed_Setup.py            (--train_steps 2000, --log_dir runs/base …)
"""
import argparse
import collections
import json
import os
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ INFO and WARNING lines
import tensorflow.compat.v1 as tf  # noqa: E402

tf.logging.set_verbosity(tf.logging.ERROR)
tf.disable_v2_behavior()

ALGORITHM = "non_distributed"


def parse_flags(argv=None):
    parser = OneLineErrorParser(description=__doc__.split("\n\n")[0])
    add_training_flags(parser, train_steps=1000, learning_rate=0.1)
    args = parser.parse_args(argv)
    check_training_flags(parser, args)
    # One process, reported in the RESULT line as the only worker of a one-task cluster.
    args.job_name, args.task_index, args.cluster = "worker", 0, {"worker": ["local"]}
    return args


def main(argv=None):
    args = parse_flags(argv)
    if not check_model_and_data(args, "local", workers=1):
        return 2
    net = Model(args)  # your load_data() and model(), below
    params = net.parameters()  # θ: the variables model() makes
    global_step = tf.train.get_or_create_global_step()
    images, labels = worker_iterator(net.train_images, net.train_labels, 0, 1,
                                     args.batch_size, args.seed).get_next()
    loss = net.loss(params, images, labels)
    # θ is read in place on this one device: tf.tuple holds every gradient back until all are
    # computed, so that no update of θ starts under a backward pass still reading it.
    gradients = tf.tuple(tf.gradients(loss, params))
    update = tf.train.GradientDescentOptimizer(args.learning_rate).apply_gradients(
        zip(gradients, params))
    with tf.control_dependencies([update]):
        train_op = tf.assign_add(global_step, 1)
    test_accuracy = net.accuracy(params)
    tf.summary.scalar("loss", loss)
    tf.summary.scalar("test_accuracy", test_accuracy)

    who = "local"
    config = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=2)
    with tf.train.MonitoredTrainingSession(
            checkpoint_dir=args.log_dir, config=config,
            save_checkpoint_steps=args.checkpoint_every if args.log_dir else None,
            save_checkpoint_secs=None, save_summaries_steps=args.log_every,
            log_step_count_steps=None) as sess:
        first_step = step = sess.run(global_step)
        started, local_steps, losses, curve = time.time(), 0, [], []
        while step < args.train_steps:
            step, loss_value = sess.run([train_op, loss])
            local_steps += 1
            losses.append(loss_value)
            if args.step_delay:
                time.sleep(args.step_delay)
            if local_steps % args.log_every == 0:
                accuracy_value = sess.run(test_accuracy)
                curve.append([round(time.time(), 3), int(step), round(float(accuracy_value), 4)])
                print("[%s] step %d loss %.4f test accuracy %.4f %.0f steps/s"
                      % (who, step, np.mean(losses[-args.log_every:]), accuracy_value,
                         local_steps / (time.time() - started)), flush=True)
        accuracy_value = sess.run(test_accuracy)
    report(args, who, local_steps, first_step, step, losses[-args.log_every:], accuracy_value,
           curve, started)
    return 0


# ---------------------------------------------------------------------------------------------
# Your model and your data: edit these two functions, nothing else (README.md, "Bring your own
# model"). The algorithm above places and wires whatever variables model() makes.
# ---------------------------------------------------------------------------------------------
def load_data(args):
    """(train_images, train_labels), (test_images, test_labels) as NumPy arrays: images of any
    one shape, labels 0 ... classes - 1 (the number of classes comes from them)."""
    if args.dataset == "mnist":  # downloads once, into ~/.keras/datasets
        (train_images, train_labels), (test_images, test_labels) = (
            tf.keras.datasets.mnist.load_data())
        return ((train_images.reshape(len(train_images), -1) / 255.0, train_labels),
                (test_images.reshape(len(test_images), -1) / 255.0, test_labels))
    from sklearn.datasets import load_digits
    digits = load_digits()  # 1,797 8×8 images of handwritten digits, shipped with scikit-learn
    images, labels = digits.data / 16.0, digits.target
    order = np.random.RandomState(args.seed).permutation(len(images))
    test, train = np.split(order, [int(np.ceil(0.2 * len(images)))])  # 20 % to test
    return (images[train], labels[train]), (images[test], labels[test])


def model(images, classes):
    """The logits (classes of them per image) of a minibatch, in ordinary TF1 code that makes
    its own variables (tf.get_variable, tf.layers). The default: 64→128→classes with ReLU, its
    θ₀ drawn with NumPy from --seed (the graph's seed), the same on TensorFlow 1.x and 2.x."""
    draw = np.random.RandomState(tf.get_default_graph().seed).uniform

    def dense(inputs, units, name):  # Glorot-uniform weights, zero biases
        fan_in = int(inputs.shape[-1])
        limit = np.sqrt(6.0 / (fan_in + units))
        weights = tf.get_variable(name + "_weights", initializer=draw(
            -limit, limit, (fan_in, units)).astype(np.float32))
        biases = tf.get_variable(name + "_biases", initializer=np.zeros(units, np.float32))
        return tf.matmul(inputs, weights) + biases

    return dense(tf.nn.relu(dense(images, 128, "hidden")), classes, "output")


# =============================================================================================
# Appendix: the blocks of plumbing this example uses, each the same in every script that
# uses it (tools/shared_helpers.py checks them; docs/appendix.md explains them). Nothing
# below is specific to the algorithm above.
# =============================================================================================
# -- Training flags -------------------------------------------------------------------------------
class OneLineErrorParser(argparse.ArgumentParser):
    """Bad input ends with one line that names the problem, and exit code 2."""

    def __init__(self, **options):
        super().__init__(formatter_class=argparse.ArgumentDefaultsHelpFormatter, **options)

    def error(self, message):
        printable = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        self.exit(2, "%s: error: %s (see --help)\n" % (self.prog, printable))


def add_training_flags(parser, train_steps, learning_rate, batch_size=32):
    training = parser.add_argument_group("training")
    training.add_argument("--train_steps", type=int, default=train_steps,
                          help="stop when the global step reaches this many updates")
    training.add_argument("--batch_size", type=int, default=batch_size,
                          help="examples per minibatch, per worker")
    training.add_argument("--learning_rate", type=float, default=learning_rate,
                          help="step size η of gradient descent")
    training.add_argument("--seed", type=int, default=0,
                          help="seeds the data split, the initial parameters and the shuffling")
    training.add_argument("--dataset", choices=["digits", "mnist"], default="digits",
                          help="'digits' ships with scikit-learn; 'mnist' downloads once")
    training.add_argument("--log_dir",
                          help="checkpoints and TensorBoard summaries go here, and a restarted "
                               "run resumes from them; without it nothing is written")
    training.add_argument("--log_every", type=int, default=250,
                          help="print progress and evaluate the test set every this many "
                               "local steps")
    training.add_argument("--checkpoint_every", type=int, default=500,
                          help="with --log_dir, save a checkpoint every this many global steps")
    training.add_argument("--step_delay", type=float, default=0.0,
                          help="seconds this task sleeps after each step: a deliberate "
                               "straggler, or an emulated compute time (tools/emulate)")
    training.add_argument("--payload_mb", type=float, default=0.0,
                          help="emulation (tools/emulate): θ carries one more variable of this "
                               "many MiB, which the model does not use (a zero gradient), so "
                               "that every exchange carries its bytes")


def check_training_flags(parser, args):
    """Every number in its range, said before any server starts."""
    for name, most in (("train_steps", 10 ** 9), ("batch_size", 10 ** 6), ("log_every", 10 ** 9),
                       ("checkpoint_every", 10 ** 9), ("seed", 2 ** 31 - 1)):
        least = 0 if name == "seed" else 1
        if not least <= getattr(args, name) <= most:
            parser.error("--%s must be an integer from %d to %d, got %d"
                         % (name, least, most, getattr(args, name)))
    for name, most in (("learning_rate", float("inf")), ("timeout", 10.0 ** 6),
                       ("step_delay", 3600.0), ("payload_mb", 4096.0)):
        if not hasattr(args, name):  # (the one-process baseline has no --timeout)
            continue
        value, positive = getattr(args, name), name in ("learning_rate", "timeout")
        if not (0 < value < most if positive else 0 <= value <= most):
            parser.error("--%s must be a finite number %s, got %g" % (
                name, "above 0" + (" and below %g" % most if most < float("inf") else "")
                if positive else "from 0 to %g" % most, value))


# -- The RESULT line ------------------------------------------------------------------------------
def report(args, who, local_steps, first_global_step, global_step, losses, test_accuracy,
           curve, started, **algorithm_fields):
    """The RESULT line: one JSON object that the launcher, the tests and the benchmark read."""
    seconds = time.time() - started
    result = {"algorithm": ALGORITHM, "job": args.job_name, "task_index": args.task_index,
              "workers": len(args.cluster["worker"]), "global_step": int(global_step),
              "first_global_step": int(first_global_step), "local_steps": local_steps,
              "train_loss": round(float(np.mean(losses)), 4) if losses else None,
              "test_accuracy": round(float(test_accuracy), 4),
              "wall_seconds": round(seconds, 3),
              "steps_per_second": round(local_steps / seconds, 1) if seconds > 0 else None,
              "cpu_seconds": round(time.process_time(), 2), "curve": curve}
    result.update(algorithm_fields)
    print("[%s] RESULT %s" % (who, json.dumps(result)), flush=True)


# -- Your data and model, as the algorithms use them ----------------------------------------------
def handed_over(*arrays):
    """A dataset of one element, these NumPy arrays, which Python hands over at each pass:
    as constants in the graph they would be copied several times, and capped at 2 GB."""
    return tf.data.Dataset.from_generator(lambda: [arrays], tuple(a.dtype for a in arrays),
                                          tuple(a.shape for a in arrays))


def as_tensors(*arrays):
    """The arrays as tensors, handed over anew to each run that reads them."""
    with tf.device("/device:CPU:0"):  # (the worker's CPU, on a GPU worker too)
        return tf.data.make_one_shot_iterator(handed_over(*arrays).repeat()).get_next()


def worker_iterator(images, labels, worker, workers, batch_size, seed):
    """This worker's shard of the training set, shuffled and batched in the graph."""
    shard = handed_over(images[worker::workers], labels[worker::workers]).unbatch()
    shard = shard.shuffle(len(images) // workers + 1, seed=seed + worker).repeat()
    return tf.data.make_one_shot_iterator(shard.batch(batch_size))


class Model:
    """Your load_data() and model(), as the algorithms use them: θ is the list of variables
    model() makes; model() is called again with θ's values (tensors) in their place."""
    loaded = (None, None)  # (args, load_data(args)): the data are loaded once per task

    def __init__(self, args):
        if Model.loaded[0] is not args:  # (the check before the servers, then the graph)
            Model.loaded = (args, load_data(args))
        (train_images, train_labels), (test_images, test_labels) = Model.loaded[1]
        self.train_images, self.test_images = (np.asarray(train_images, np.float32),
                                               np.asarray(test_images, np.float32))
        self.train_labels, self.test_labels = (np.asarray(train_labels, np.int64),
                                               np.asarray(test_labels, np.int64))
        self.classes = int(max(self.train_labels.max(initial=0),
                               self.test_labels.max(initial=0))) + 1
        self.payload = int(args.payload_mb * 2 ** 18)  # (float32 elements)
        self.order = None  # which variable of θ each of model()'s requests gets
        self.seed = args.seed

    def parameters(self, scope=None, **variable_options):
        """A set of model()'s variables where the device scope puts them: θ, or a copy of it
        (under scope, with variable_options such as collections and trainable)."""
        requested = []

        def make(getter, name, *args, **kwargs):
            requested.append(getter(name, *args, **dict(kwargs, **variable_options)))
            return requested[-1]

        graph = tf.get_default_graph()
        graph.seed, seed = self.seed, graph.seed  # model() draws θ₀ from --seed, the graph's
        with tf.variable_scope(scope or tf.get_variable_scope(), custom_getter=make):
            model(tf.placeholder(tf.float32, (None,) + self.train_images.shape[1:]),
                  self.classes)
            made = list(collections.OrderedDict.fromkeys(requested))
            self.order = [made.index(variable) for variable in requested]
            if self.payload:
                made.append(tf.get_variable("payload", initializer=tf.zeros([self.payload]),
                                            **variable_options))
        graph.seed = seed
        return made

    def logits(self, theta, images):
        """model(images), each of its variables replaced by the tensor of θ at its place."""
        given = iter([theta[i] for i in self.order])

        def use_theta(getter, name, *args, **kwargs):
            return next(given)

        with tf.variable_scope(tf.get_variable_scope(), custom_getter=use_theta):
            return model(images, self.classes)

    def loss(self, theta, images, labels):
        """The mean softmax cross-entropy of a minibatch (+ 0·Σ payload: a zero gradient)."""
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=self.logits(theta, images)))
        return loss + 0.0 * tf.reduce_sum(theta[-1]) if self.payload else loss

    def accuracy(self, theta, images=None, labels=None):
        """The share of images (by default the test set) whose largest logit is their label."""
        if images is None:
            images, labels = as_tensors(self.test_images, self.test_labels)
        predictions = tf.argmax(self.logits(theta, images), axis=1)
        return tf.reduce_mean(tf.cast(tf.equal(predictions, labels), tf.float32))


def check_model_and_data(args, who, workers):
    """Whether load_data() and model() can train, said by every task in one line before any
    server starts: the data, the model's build, logits and gradients, a --log_dir checkpoint."""
    problem = model_and_data_problem(args, workers)
    if problem:
        print("[%s] error: %s" % (who, problem), file=sys.stderr, flush=True)
    return not problem


def model_and_data_problem(args, workers):
    with tf.Graph().as_default():
        try:
            net = Model(args)
        except Exception as error:  # (the user's load_data: any error, said in one line)
            return "load_data() failed (%s: %s): fix load_data in the script" % (
                type(error).__name__, error)
        train, test, labels = net.train_images, net.test_images, (net.train_labels,
                                                                  net.test_labels)
        if not workers <= len(train) == len(labels[0]) or not 0 < len(test) == len(labels[1]):
            return ("load_data() gave %d training examples (%d labels) for %d workers and %d "
                    "test examples (%d labels): every worker needs a shard and every image a "
                    "label" % (len(train), len(labels[0]), workers, len(test), len(labels[1])))
        if train.shape[1:] != test.shape[1:] or min(labels[0].min(), labels[1].min()) < 0:
            return ("training images of shape %s, test images of shape %s, smallest label %d: "
                    "images must have one shape and labels be 0 ... classes - 1" % (
                        train.shape[1:], test.shape[1:], min(labels[0].min(), labels[1].min())))
        try:
            theta = net.parameters()
            outside = sorted({v.op.name for v in tf.global_variables()}
                             - {v.op.name for v in theta})
            loss = net.loss(theta, train[:8], labels[0][:8])
            width = net.logits(theta, train[:8]).shape[-1]
        except Exception as error:
            return "model(images of shape %s, %d classes) failed (%s: %s): fix model in the " \
                   "script" % ((None,) + train.shape[1:], net.classes, type(error).__name__,
                               str(error).splitlines()[0] if str(error) else "")
        if outside:  # (tf.keras layers make theirs with tf.Variable)
            return ("model() makes variables that tf.get_variable did not make (%s): the "
                    "algorithm places only those, so build it with tf.layers or tf.get_variable, "
                    "not tf.keras layers or tf.Variable" % ", ".join(outside))
        if tf.get_collection(tf.GraphKeys.UPDATE_OPS):
            return ("model() makes state that is not a trained parameter (update ops): use "
                    "trainable variables only (no batch normalization's moving averages)")
        if width != net.classes:
            return ("model() returns %s logits per image for %d classes (labels 0 ... %d): its "
                    "last layer must have `classes` units" % (width, net.classes,
                                                              net.classes - 1))
        no_gradient = [v.op.name for v, g in zip(theta, tf.gradients(loss, theta)) if g is None]
        if no_gradient:
            return ("model() makes variables that get no gradient: %s: use every variable in "
                    "the logits, or do not make it" % ", ".join(no_gradient))
        with tf.Session(config=tf.ConfigProto(intra_op_parallelism_threads=1,
                                              inter_op_parallelism_threads=1)) as sess:
            sess.run(tf.global_variables_initializer())
            if not np.isfinite(sess.run(loss)):
                return ("the loss of model() at its initial θ is not finite: check load_data's "
                        "values and model's initial values")
        if args.log_dir and os.path.isdir(args.log_dir):
            # Five checkpoints kept and one being written, each θ and a meta graph (about three
            # times this check's graph), and the graph once more as text and in the events.
            graph = tf.get_default_graph().as_graph_def().ByteSize()
            needed = 6 * (sum(v.shape.num_elements() * v.dtype.size for v in theta)
                          + 3 * graph) + 16 * graph + 2 ** 20
            free = os.statvfs(args.log_dir).f_bavail * os.statvfs(args.log_dir).f_frsize
            if free < needed:
                return ("--log_dir %s has %d KiB free, and its checkpoints need about %d KiB: "
                        "free some space or name another directory"
                        % (args.log_dir, free // 1024, needed // 1024))
        checkpoint = args.log_dir and tf.train.latest_checkpoint(args.log_dir)
        try:
            saved = checkpoint and tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
        except (tf.errors.OpError, ValueError):
            saved = None  # (a damaged checkpoint: the chief skips it, saying so)
        differ = ["%s (%s here, %s there)" % (v.op.name, v.shape.as_list(),
                                             saved.get(v.op.name, "none"))
                  for v in theta if saved and saved.get(v.op.name) != v.shape.as_list()]
        if differ:
            return ("--log_dir %s holds a checkpoint of another model: %s: give this model its "
                    "own --log_dir" % (args.log_dir, "; ".join(differ)))
    return None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
