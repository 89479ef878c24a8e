"""Distributed set-up: one parameter server, workers that compute, MonitoredTrainingSession.

The smallest correct between-graph replication in TensorFlow 1.x. The parameters θ live on the
parameter server (`tf.train.replica_device_setter` puts every variable there); each worker builds
the same graph, computes the gradient of its own minibatch and applies it to θ on the ps without
waiting for the others:

    θ ← θ − η·g        (on the ps, once per worker step; global_step += 1)

`tf.train.MonitoredTrainingSession` initializes (or restores) θ on the chief, writes checkpoints
and TensorBoard summaries with `--log_dir`, and stops every worker at `--train_steps` global steps.
`dist_setup_sup.py` is the same example with the older `tf.train.Supervisor`.

One host (one ps and one worker, on free ports):   bash run.sh     (WORKERS=3 bash run.sh)
Several hosts, one command per task:
    python dist_setup.py --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=ps --task_index=0
    python dist_setup.py --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=worker --task_index=0
    python dist_setup.py --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=worker --task_index=1
or without the cluster flags, from the TF_CONFIG environment variable that cluster managers set.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ INFO and WARNING lines
import tensorflow.compat.v1 as tf  # noqa: E402

tf.logging.set_verbosity(tf.logging.ERROR)
tf.disable_v2_behavior()

ALGORITHM = "dist_setup"
STARTED = time.time()


# ---------------------------------------------------------------------------------------------
# Flags: the cluster (the TensorFlow 1.x convention, or TF_CONFIG), then training.
# ---------------------------------------------------------------------------------------------
class OneLineErrorParser(argparse.ArgumentParser):
    """Bad input ends with one line that names the problem, and exit code 2."""

    def error(self, message):
        printable = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        self.exit(2, "%s: error: %s (see --help)\n" % (self.prog, printable))


def add_cluster_flags(parser):
    cluster = parser.add_argument_group("cluster (default: one ps on localhost:2222, "
                                        "workers on localhost:2223,localhost:2224)")
    cluster.add_argument("--job_name", choices=["ps", "worker"],
                         help="this task's job: 'ps' holds the parameters, 'worker' trains")
    cluster.add_argument("--task_index", type=int,
                         help="this task's index within its job; worker 0 is the chief")
    cluster.add_argument("--ps_hosts", help="comma-separated host:port of every parameter server")
    cluster.add_argument("--worker_hosts", help="comma-separated host:port of every worker")
    cluster.add_argument("--timeout", type=float, default=60.0,
                         help="seconds a task waits for a peer (start-up, a blocked step) "
                              "before it gives up with an error")


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


def check_training_flags(parser, args):
    for name in ("train_steps", "batch_size", "log_every", "checkpoint_every"):
        if getattr(args, name) <= 0:
            parser.error("--%s must be a positive integer, got %d" % (name, getattr(args, name)))
    if not args.learning_rate > 0:
        parser.error("--learning_rate must be positive, got %g" % args.learning_rate)
    if args.step_delay < 0:
        parser.error("--step_delay must be >= 0, got %g" % args.step_delay)


def parse_host_list(parser, flag, text):
    hosts = [host.strip() for host in text.split(",")] if text else []
    for host in hosts:
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit() or not 0 < int(port) < 65536:
            parser.error("%s: '%s' is not host:port with a port in 1-65535" % (flag, host))
    if not hosts:
        parser.error("%s: at least one host:port is needed" % flag)
    return hosts


def cluster_from_flags(parser, args):
    """Returns ({'ps': [...], 'worker': [...]}, job_name, task_index) from the flags or TF_CONFIG."""
    if not args.timeout > 0:
        parser.error("--timeout must be positive, got %g" % args.timeout)
    flags_given = any(getattr(args, name) is not None
                      for name in ("job_name", "task_index", "ps_hosts", "worker_hosts"))
    if not flags_given and os.environ.get("TF_CONFIG"):
        try:
            tf_config = json.loads(os.environ["TF_CONFIG"])
            cluster, task = tf_config["cluster"], tf_config["task"]
            ps_hosts, worker_hosts = ",".join(cluster["ps"]), ",".join(cluster["worker"])
            job_name, task_index = task["type"], int(task["index"])
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            parser.error("TF_CONFIG must be JSON like {\"cluster\": {\"ps\": [...], \"worker\": "
                         "[...]}, \"task\": {\"type\": \"worker\", \"index\": 0}} (%s: %s)"
                         % (type(error).__name__, error))
        if set(cluster) - {"ps", "worker"}:
            parser.error("TF_CONFIG: only 'ps' and 'worker' jobs are used here (worker 0 is the "
                         "chief), got %s" % sorted(cluster))
    else:
        def given(value, default):
            return default if value is None else value
        ps_hosts = given(args.ps_hosts, "localhost:2222")
        worker_hosts = given(args.worker_hosts, "localhost:2223,localhost:2224")
        job_name, task_index = given(args.job_name, "worker"), given(args.task_index, 0)
    cluster = {"ps": parse_host_list(parser, "ps hosts", ps_hosts),
               "worker": parse_host_list(parser, "worker hosts", worker_hosts)}
    if job_name not in cluster:
        parser.error("unknown job name '%s': use 'ps' or 'worker'" % job_name)
    if not 0 <= task_index < len(cluster[job_name]):
        parser.error("task index %d is out of range: there are %d %s task(s)"
                     % (task_index, len(cluster[job_name]), job_name))
    every_host = cluster["ps"] + cluster["worker"]
    duplicates = sorted({host for host in every_host if every_host.count(host) > 1})
    if duplicates:
        parser.error("host:port used by more than one task: %s" % ", ".join(duplicates))
    port = int(cluster[job_name][task_index].rpartition(":")[2])
    probe = socket.socket()
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("", port))
    except OSError:
        parser.error("port %d is already in use on this machine: stop what holds it or pick "
                     "another port" % port)
    finally:
        probe.close()
    return cluster, job_name, task_index


def parse_flags(argv=None):
    parser = OneLineErrorParser(description=__doc__.split("\n\n")[0])
    add_cluster_flags(parser)
    add_training_flags(parser, train_steps=1000, learning_rate=0.1)
    args = parser.parse_args(argv)
    check_training_flags(parser, args)
    args.cluster, args.job_name, args.task_index = cluster_from_flags(parser, args)
    return args


# ---------------------------------------------------------------------------------------------
# Cluster: start this task's server; the ps serves until every worker has said it is done.
# ---------------------------------------------------------------------------------------------
def task_name(job_name, task_index):
    return "%s%d" % (job_name, task_index)


def session_config(args):
    """Few threads (the tasks share the machine's cores), bounded waits, and no chatter with
    the other workers: a worker only needs the ps tasks and itself."""
    return tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=2,
                          operation_timeout_in_ms=int(args.timeout * 1000),
                          device_filters=["/job:ps", "/job:%s/task:%d" % (args.job_name,
                                                                           args.task_index)])


class Watchdog:
    """Ends this task when a ps it has reached stops answering (within about 1.5 s), or when it
    makes no progress for --timeout seconds. TensorFlow itself can wait forever (creating a
    session while a ps is down; MonitoredTrainingSession re-creating one it lost), so every
    worker runs under one. The error names the tasks that no longer answer."""

    def __init__(self, args, who):
        self.args, self.who = args, who
        self.last_progress = time.monotonic()
        self.stopped = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def progress(self):
        self.last_progress = time.monotonic()

    def stop(self):
        self.stopped.set()

    def _watch(self):
        reached, strikes = set(), {}
        while not self.stopped.wait(0.5):
            down = set(unreachable(self.args.cluster, "ps"))
            reached |= set(range(len(self.args.cluster["ps"]))) - down
            strikes = {index: strikes.get(index, 0) + 1 for index in down & reached}
            stuck = time.monotonic() - self.last_progress > self.args.timeout
            if (stuck or max(strikes.values(), default=0) >= 3) and not self.stopped.is_set():
                print("[%s] error: %s" % (self.who, why_stuck(self.args)), file=sys.stderr,
                      flush=True)
                os._exit(1)


def why_stuck(args):
    lost_ps = unreachable(args.cluster, "ps")
    if lost_ps:
        return "lost the parameter server: %s is gone" % describe(args.cluster, "ps", lost_ps)
    silent = unreachable(args.cluster, "worker")
    return "no progress for %g s (--timeout); %s" % (
        args.timeout, "not answering: " + describe(args.cluster, "worker", silent) if silent
        else "every task still answers")


def unreachable(cluster, job_name):
    """Indices of the tasks of a job whose port accepts no connection: how a dead peer is found."""
    dead = []
    for index, host in enumerate(cluster[job_name]):
        name, _, port = host.rpartition(":")
        try:
            socket.create_connection((name, int(port)), timeout=1.0).close()
        except OSError:
            dead.append(index)
    return dead


def describe(cluster, job_name, indices):
    return ", ".join("%s (%s)" % (task_name(job_name, index), cluster[job_name][index])
                     for index in indices)


def status_queues(cluster):
    """One queue per ps, on which each worker enqueues (its index, b"started") when it has
    connected and (its index, b"done") when it has finished. The ps learns who is up from the
    workers themselves, so even a worker that dies a moment after starting is accounted for."""
    workers = len(cluster["worker"])
    queues = []
    for index in range(len(cluster["ps"])):
        with tf.device("/job:ps/task:%d" % index):
            queues.append(tf.FIFOQueue(2 * workers, [tf.int32, tf.string],
                                       shared_name="status_queue%d" % index,
                                       name="status_queue%d" % index))
    return queues


def ready_queue():
    """Closed by the chief once θ is initialized or restored: a closed, empty queue answers every
    dequeue at once, so waiting workers wake up without polling, however late they start."""
    with tf.device("/job:ps/task:0"):
        return tf.FIFOQueue(1, tf.int32, shared_name="ready_queue", name="ready_queue")


def run_parameter_server(args, server):
    """Serve θ until every worker has said "done" and exited. (Exiting sooner could hang a
    worker: in TF 1.x, closing a session whose ps is gone can block for good.) A worker whose
    port closes after it said "started" but before "done", or that has not started within
    --timeout, is reported and the ps exits 1."""
    me = task_name("ps", args.task_index)
    everyone = set(range(len(args.cluster["worker"])))
    with tf.Graph().as_default():
        queue = status_queues(args.cluster)[args.task_index]
        waiting, dequeue = queue.size(), queue.dequeue()
        with tf.Session(server.target, config=session_config(args)) as sess:
            started, done, strikes = set(), set(), {}
            while True:
                time.sleep(0.2)  # between looks at the ports and the queue
                # The ports first, then the queue: a worker whose port was already closed has
                # said all it ever will. Only this ps dequeues, so taking what size() counted
                # never waits. (Do not poll with a dequeue that times out: in TF 1.x one that
                # times out just as an item arrives can take the item, and it is lost.)
                down = set(unreachable(args.cluster, "worker"))
                for _ in range(sess.run(waiting)):
                    index, status = sess.run(dequeue)
                    (done if status == b"done" else started).add(int(index))
                    all_done_at = time.time()
                if done == everyone:
                    if down == everyone or time.time() - all_done_at > args.timeout:
                        break
                    continue
                strikes = {index: strikes.get(index, 0) + 1 for index in (down & started) - done}
                lost = sorted(index for index, count in strikes.items() if count >= 3)
                never_up = sorted(everyone - started - done)
                if lost and len(done) + len(lost) == len(everyone):
                    print("[%s] error: %s stopped without finishing; %d of %d workers finished"
                          % (me, describe(args.cluster, "worker", lost), len(done),
                             len(everyone)), file=sys.stderr)
                    return 1
                if never_up and time.time() - STARTED > args.timeout:
                    print("[%s] error: %s never came up within %g s (--timeout)"
                          % (me, describe(args.cluster, "worker", never_up), args.timeout),
                          file=sys.stderr)
                    return 1
    print("[%s] all %d workers are done; exiting (%.2f s of CPU time)"
          % (me, len(everyone), time.process_time()), flush=True)
    return 0


def tell_parameter_servers(args, server, status):
    """Enqueue (this worker's index, status) on every ps: b"started" or b"done". A session
    whose ps is not up yet retries once a second; watching the ports (bounded by the Watchdog)
    connects the moment they open."""
    while unreachable(args.cluster, "ps"):
        time.sleep(0.05)
    with tf.Graph().as_default():
        enqueues = [queue.enqueue((args.task_index, status))
                    for queue in status_queues(args.cluster)]
        with tf.Session(server.target, config=session_config(args)) as sess:
            sess.run(enqueues)


def wait_until_chief_is_ready(args, server):
    """A non-chief worker blocks on the ready queue until the chief closes it."""
    with tf.Graph().as_default():
        dequeue = ready_queue().dequeue()
        with tf.Session(server.target, config=session_config(args)) as sess:
            try:
                sess.run(dequeue)
            except tf.errors.OutOfRangeError:
                pass


class CloseReadyQueueHook(tf.train.SessionRunHook):
    """Run on the chief once its session has initialized or restored θ."""

    def __init__(self):
        self._close = ready_queue().close()

    def after_create_session(self, session, coord):
        session.run(self._close)


# ---------------------------------------------------------------------------------------------
# Data and model: the same in every example (seeded, so that results are comparable).
# ---------------------------------------------------------------------------------------------
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
    """This worker's shard of the training set, shuffled and batched inside the graph."""
    shard = tf.data.Dataset.from_tensor_slices((images[worker::workers], labels[worker::workers]))
    shard = shard.shuffle(len(images) // workers + 1, seed=seed + worker).repeat()
    return tf.data.make_one_shot_iterator(shard.batch(batch_size)).get_next()


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


def pack(tensors):
    """Tensors as one flat vector (the inverse of unpack)."""
    return tf.concat([tf.reshape(tensor, [-1]) for tensor in tensors], axis=0)


def unpack(vector, like):
    """Tensors shaped like the variables `like`, cut from a vector that pack made."""
    pieces = tf.split(vector, [variable.shape.num_elements() for variable in like])
    return [tf.reshape(piece, variable.shape) for piece, variable in zip(pieces, like)]


def by_ps_task(params):
    """[(device, indices of the variables on it)], one entry per ps task that holds some."""
    devices = sorted({variable.device for variable in params})
    return [(device, [i for i, variable in enumerate(params) if variable.device == device])
            for device in devices]


def read_from_the_ps(params):
    """θ as this worker uses it. TensorFlow 1.x sends every tensor that crosses tasks as its own
    RPC, so each ps task packs its variables into one vector, which reaches the worker as one
    message and is cut back into tensors here."""
    theta = [None] * len(params)
    for device, indices in by_ps_task(params):
        on_ps = [params[i] for i in indices]
        with tf.device(device):
            message = pack(on_ps)
        for i, value in zip(indices, unpack(message, on_ps)):
            theta[i] = value
    return theta


def apply_on_the_ps(optimizer, gradients, params):
    """optimizer.apply_gradients(zip(gradients, params)), run on the ps next to θ, with the
    gradients packed on this worker into one message per ps task."""
    updates = []
    for device, indices in by_ps_task(params):
        on_ps = [params[i] for i in indices]
        message = pack([gradients[i] for i in indices])
        with tf.device(device):
            updates.append(optimizer.apply_gradients(zip(unpack(message, on_ps), on_ps)))
    return tf.group(*updates)


# ---------------------------------------------------------------------------------------------
# The algorithm: plain asynchronous SGD with θ on the ps.
# ---------------------------------------------------------------------------------------------
def build_graph(args):
    """θ and global_step on the ps; input, forward and backward passes on this worker."""
    (train_images, train_labels), (test_images, test_labels) = load_dataset(args.dataset,
                                                                            args.seed)
    workers = len(args.cluster["worker"])
    worker_device = "/job:worker/task:%d" % args.task_index
    with tf.device(tf.train.replica_device_setter(
            worker_device=worker_device, cluster=tf.train.ClusterSpec(args.cluster))):
        params = create_parameters(initial_parameters(train_images.shape[1], 10, args.seed))
        global_step = tf.train.get_or_create_global_step()
        images, labels = worker_batches(train_images, train_labels, args.task_index, workers,
                                        args.batch_size, args.seed)
        # θ comes from the ps in one message; the forward and backward passes run here ...
        theta = read_from_the_ps(params)
        loss = cross_entropy(theta, images, labels)
        gradients = tf.gradients(loss, theta)
        # ... and θ ← θ − η·g runs on the ps, g sent as one message; then the ps counts the
        # update (even its constant 1 is made there: nothing else crosses the network), with a
        # lock, so that two workers' increments at the same moment both count. The step
        # returns the new global_step.
        update = apply_on_the_ps(tf.train.GradientDescentOptimizer(args.learning_rate),
                                 gradients, params)
        with tf.control_dependencies([update]), tf.device(global_step.device):
            train_op = tf.assign_add(global_step, 1, use_locking=True)
        test_accuracy = accuracy(params, test_images, test_labels)
    tf.summary.scalar("loss", loss)
    tf.summary.scalar("test_accuracy", test_accuracy)
    return {"train_op": train_op, "loss": loss, "global_step": global_step,
            "test_accuracy": test_accuracy}


# ---------------------------------------------------------------------------------------------
# Training loop and shutdown.
# ---------------------------------------------------------------------------------------------
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


def train(args, server, watchdog):
    who = task_name("worker", args.task_index)
    is_chief = args.task_index == 0
    graph = build_graph(args)
    if not is_chief:
        wait_until_chief_is_ready(args, server)
    with tf.train.MonitoredTrainingSession(
            master=server.target, is_chief=is_chief, checkpoint_dir=args.log_dir,
            chief_only_hooks=[CloseReadyQueueHook()], config=session_config(args),
            save_checkpoint_steps=args.checkpoint_every if args.log_dir else None,
            save_checkpoint_secs=None, save_summaries_steps=args.log_every,
            log_step_count_steps=None) as sess:
        first_global_step = global_step = sess.run(graph["global_step"])
        started, local_steps, losses, curve = time.time(), 0, [], []
        while global_step < args.train_steps:
            global_step, loss = sess.run([graph["train_op"], graph["loss"]])
            watchdog.progress()
            local_steps += 1
            losses.append(loss)
            if args.step_delay:
                time.sleep(args.step_delay)
            if local_steps % args.log_every == 0:
                test_accuracy = sess.run(graph["test_accuracy"])
                curve.append([round(time.time(), 3), int(global_step), round(float(test_accuracy), 4)])
                print("[%s] step %d (global %d) loss %.4f test accuracy %.4f %.0f steps/s"
                      % (who, local_steps, global_step, np.mean(losses[-args.log_every:]),
                         test_accuracy, local_steps / (time.time() - started)), flush=True)
        test_accuracy, global_step = sess.run([graph["test_accuracy"], graph["global_step"]])
    tell_parameter_servers(args, server, b"done")
    report(args, who, local_steps, first_global_step, global_step, losses[-args.log_every:],
           test_accuracy, curve, started)
    return 0


def main(argv=None):
    args = parse_flags(argv)
    who = task_name(args.job_name, args.task_index)
    server = tf.train.Server(tf.train.ClusterSpec(args.cluster), job_name=args.job_name,
                             task_index=args.task_index, config=session_config(args))
    if args.job_name == "ps":
        return run_parameter_server(args, server)
    watchdog = Watchdog(args, who)
    try:
        tell_parameter_servers(args, server, b"started")
        return train(args, server, watchdog)
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
            tf.errors.AbortedError) as error:
        print("[%s] error: %s (%s)" % (who, why_stuck(args), error.message.splitlines()[0]),
              file=sys.stderr)
        return 1
    finally:
        watchdog.stop()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
