"""Non-distributed baseline: the same model, data and SGD in one process, θ on the local CPU.

Every distributed example in this collection trains the same network (64→128→10, ReLU, softmax
cross-entropy) on the same digits, from the same seeded θ. This script trains it without any
cluster, so that its accuracy and its time to accuracy are the reference every speed-up is
measured against:

    θ ← θ − η·g        (one minibatch of --batch_size examples per step)

Run it:   python Non-Distributed_Setup.py            (--train_steps 2000, --log_dir runs/base …)
"""
import argparse
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


ONE_STEP_PER_RUN_BECAUSE = ("it is the one-process step that the distributed examples are "
                            "measured against")


def main(argv=None):
    args = parse_flags(argv)
    (train_images, train_labels), (test_images, test_labels) = load_dataset(args.dataset,
                                                                            args.seed)
    params = create_parameters(initial_parameters(train_images.shape[1], 10, args.seed))
    global_step = tf.train.get_or_create_global_step()
    images, labels = worker_batches(train_images, train_labels, 0, 1, args.batch_size, args.seed)
    loss = cross_entropy(params, images, labels)
    # θ is read in place on this one device: tf.tuple holds every gradient back until all are
    # computed, so that no update of θ starts under a backward pass still reading it.
    gradients = tf.tuple(tf.gradients(loss, params))
    update = tf.train.GradientDescentOptimizer(args.learning_rate).apply_gradients(
        zip(gradients, params))
    with tf.control_dependencies([update]):
        train_op = tf.assign_add(global_step, 1)
    test_accuracy = accuracy(params, test_images, test_labels)
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


# =============================================================================================
# Appendix: the helpers this baseline shares with every distributed example (the same flags,
# data, model and RESULT line), each one identical to the distributed appendix's copy;
# tools/shared_helpers.py keeps them so, and Distributed-Setup/README.md explains them.
# =============================================================================================
class OneLineErrorParser(argparse.ArgumentParser):
    """Bad input ends with one line that names the problem, and exit code 2; --help shows
    every default."""

    def __init__(self, **options):
        super().__init__(formatter_class=DefaultsInHelp, **options)

    def error(self, message):
        printable = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        self.exit(2, "%s: error: %s (see --help)\n" % (self.prog, printable))


class DefaultsInHelp(argparse.HelpFormatter):
    """Each flag's help ends with its default, where it has one."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or (
                action.default == argparse.SUPPRESS):
            return action.help
        return "%s (default: %s)" % (action.help, action.default)


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
                          help="seconds this task sleeps after each step: a deliberate straggler, "
                               "for experiments and tests")
    training.add_argument("--steps_per_run", type=int, default=1,
                          help="K: training steps per session.run, run one after the other in a "
                               "tf.while_loop on the worker; each still reads θ, computes g and "
                               "applies it, only K - 1 round trips are saved (faster). Progress, "
                               "the stop check and checkpoints then come every K steps, and a "
                               "worker may overshoot --train_steps by up to K - 1. With --window "
                               "T, K must be a multiple of T. An example that cannot loop its "
                               "step says why and refuses K > 1")


def check_training_flags(parser, args):
    for name in ("train_steps", "batch_size", "log_every", "checkpoint_every", "steps_per_run"):
        if getattr(args, name) <= 0:
            parser.error("--%s must be a positive integer, got %d" % (name, getattr(args, name)))
    if not args.learning_rate > 0:
        parser.error("--learning_rate must be positive, got %g" % args.learning_rate)
    if args.step_delay < 0:
        parser.error("--step_delay must be >= 0, got %g" % args.step_delay)
    if args.steps_per_run > 1 and steps_per_run_refused():
        parser.error("--steps_per_run %d: this example takes one step per session.run (%s): "
                     "leave it at 1" % (args.steps_per_run, steps_per_run_refused()))
    if args.steps_per_run > 1 and getattr(args, "window", 0) > 0 and (  # windows of T steps
            args.steps_per_run % args.window):
        parser.error("--steps_per_run %d must be a multiple of --window %d (a run of K steps "
                     "makes K / T whole windows, each ending on an exchange with the ps)"
                     % (args.steps_per_run, args.window))


def steps_per_run_refused():
    """Why this example takes one step per session.run only, or None where --steps_per_run K > 1
    is built: its lesson sets MANY_STEPS_PER_RUN = True and builds its step with repeat(). Any
    other script refuses K > 1, with the reason its lesson gives in ONE_STEP_PER_RUN_BECAUSE."""
    if globals().get("MANY_STEPS_PER_RUN") is True:
        return None
    return globals().get("ONE_STEP_PER_RUN_BECAUSE", "its training loop is not built for it")


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
              "steps_per_run": args.steps_per_run,
              "cpu_seconds": round(time.process_time(), 2), "curve": curve}
    result.update(algorithm_fields)
    print("[%s] RESULT %s" % (who, json.dumps(result)), flush=True)


def load_dataset(name, seed):
    """Returns (train_images, train_labels), (test_images, test_labels), pixels in [0, 1]."""
    if name == "digits":
        from sklearn.datasets import load_digits
        digits = load_digits()
        images, labels = digits.data / 16.0, digits.target
        order = np.random.RandomState(seed).permutation(len(images))
        test, train = order[:360], order[360:]
        splits = (images[train], labels[train]), (images[test], labels[test])
    else:
        (train_x, train_y), (test_x, test_y) = tf.keras.datasets.mnist.load_data()
        splits = ((train_x.reshape(len(train_x), -1) / 255.0, train_y),
                  (test_x.reshape(len(test_x), -1) / 255.0, test_y))
    return [(x.astype(np.float32), y.astype(np.int64)) for x, y in splits]


def worker_batches(images, labels, worker, workers, batch_size, seed):
    """This worker's next minibatch (images, labels): see worker_iterator."""
    return worker_iterator(images, labels, worker, workers, batch_size, seed).get_next()


def worker_iterator(images, labels, worker, workers, batch_size, seed):
    """This worker's shard of the training set, shuffled and batched inside the graph: each
    get_next() op gives the next minibatch every time it runs (in a tf.while_loop's body, once
    per iteration)."""
    shard = tf.data.Dataset.from_tensor_slices((images[worker::workers], labels[worker::workers]))
    shard = shard.shuffle(len(images) // workers + 1, seed=seed + worker).repeat()
    return tf.data.make_one_shot_iterator(shard.batch(batch_size))


def initial_parameters(inputs, classes, seed, hidden=128):
    """Glorot-uniform weights and zero biases, drawn with NumPy so that every example, and
    TensorFlow 1.x and 2.x alike, start from the same θ."""
    rng = np.random.RandomState(seed)

    def glorot(fan_in, fan_out):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)

    return [("hidden_weights", glorot(inputs, hidden)),
            ("hidden_biases", np.zeros(hidden, np.float32)),
            ("output_weights", glorot(hidden, classes)),
            ("output_biases", np.zeros(classes, np.float32))]


def create_parameters(initial, **variable_options):
    return [tf.Variable(value, name=name, **variable_options) for name, value in initial]


def logits(params, images):
    hidden_weights, hidden_biases, output_weights, output_biases = params
    hidden = tf.nn.relu(tf.matmul(images, hidden_weights) + hidden_biases)
    return tf.matmul(hidden, output_weights) + output_biases


def cross_entropy(params, images, labels):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits(params, images)))


def accuracy(params, images, labels):
    predictions = tf.argmax(logits(params, images), axis=1)
    return tf.reduce_mean(tf.cast(tf.equal(predictions, labels), tf.float32))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
