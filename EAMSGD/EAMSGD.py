"""EAMSGD: elastic averaging SGD with Nesterov momentum on each worker's local steps.

AEASGD (../AEASGD) with a momentum-driven local optimizer: each worker trains its local copy θᵢ
with Nesterov's accelerated gradient, velocity v, and every τ local steps exchanges an elastic
force with the centre variable x̃ on the parameter server, which is the model that is evaluated.
The velocity stays on the worker; only θᵢ takes part in the exchange.

    every step:        v ← δ·v − η·g(θᵢ + δ·v),  θᵢ ← θᵢ + v              (on the worker)
    every τ steps:     E = α·(θᵢ − x̃),  θᵢ ← θᵢ − E,  x̃ ← x̃ + E      (α = η·ρ; x̃ on the ps)

Paper: S. Zhang, A. Choromanska, Y. LeCun, "Deep learning with Elastic Averaging SGD",
NIPS 2015, arXiv:1412.6651 (Algorithm 2, EAMSGD).

One host (one ps and two workers, on free ports):   bash run.sh     (WORKERS=4 bash run.sh)
Several hosts, one command per task:
    python EAMSGD.py --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=ps --task_index=0
    python EAMSGD.py --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=worker --task_index=0
    python EAMSGD.py --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=worker --task_index=1
or without the cluster flags, from the TF_CONFIG environment variable that cluster managers set.
"""
import argparse
import collections
import contextlib
import fcntl
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

ALGORITHM = "EAMSGD"
STARTED = time.time()


def parse_flags(argv=None):
    parser = example_parser(
        __doc__, train_steps=2000, learning_rate=0.02,
        epilog="--train_steps is the global step at which training stops; the global step "
               "counts the minibatch steps of all workers together (an exchange adds the "
               "worker's τ local steps), the same compute budget as in the other asynchronous "
               "examples. The test accuracy reported is the centre variable x̃'s.")
    elastic = parser.add_argument_group("elastic averaging with momentum")
    elastic.add_argument("--window", type=int, default=4,
                         help="τ: local steps between two elastic exchanges with the centre "
                              "variable (the communication period)")
    elastic.add_argument("--rho", type=float, default=20.0,
                         help="ρ: stiffness of the spring between θᵢ and x̃; at each exchange "
                              "both move by α = η·ρ of the distance between them (α must be "
                              "below 1)")
    elastic.add_argument("--momentum", type=float, default=0.9,
                         help="δ: Nesterov momentum of the local steps, in [0, 1); the velocity "
                              "keeps this fraction of itself at every step (0: AEASGD)")
    args = parse_example_flags(parser, argv)
    if args.window < 1:
        parser.error("--window must be a positive integer, got %d" % args.window)
    if not args.rho > 0:
        parser.error("--rho must be positive, got %g" % args.rho)
    if not args.learning_rate * args.rho < 1:
        parser.error("α = --learning_rate × --rho must be below 1, got %g × %g = %g: the "
                     "exchange would overshoot" % (args.learning_rate, args.rho,
                                                    args.learning_rate * args.rho))
    if not 0 <= args.momentum < 1:
        parser.error("--momentum must be in [0, 1), got %g" % args.momentum)
    return args


def build_graph(args):
    """x̃ and global_step on the ps; θᵢ, the input, forward and backward passes on this worker.
    Two ops train: `local_step` (one Nesterov step on θᵢ) and `local_step_and_commit` (the
    window's last step, then the elastic exchange with x̃)."""
    net = Model(args)  # your load_data() and model(), below
    workers = len(args.cluster["worker"])
    worker_device = "/job:worker/task:%d" % args.task_index
    with tf.device(tf.train.replica_device_setter(
            worker_device=worker_device, cluster=tf.train.ClusterSpec(args.cluster))):
        centre = net.parameters()  # x̃: the variables model() makes
        global_step = tf.train.get_or_create_global_step()
        # EAMSGD: θᵢ (local/...), a local variable (not saved, not shared) that starts as a copy
        # of x̃, read once the chief has initialized or restored x̃; its velocity v
        # (velocity/...) starts at zero.
        with tf.device(worker_device):
            local = [tf.Variable(x.read_value(), name="local/" + x.op.name, trainable=False,
                                 collections=[tf.GraphKeys.LOCAL_VARIABLES]) for x in centre]
            velocity = [tf.Variable(tf.zeros(x.shape, x.dtype.base_dtype), trainable=False,
                                    name="velocity/" + x.op.name,
                                    collections=[tf.GraphKeys.LOCAL_VARIABLES]) for x in centre]
        batches = worker_iterator(net.train_images, net.train_labels, args.task_index, workers,
                                  args.batch_size, args.seed)

        # A local step, without talking to the ps: Nesterov momentum on θᵢ.
        images, labels = batches.get_next()
        loss, local_step = nesterov_step(net, local, velocity, images, labels,
                                         args.learning_rate, args.momentum)

        # EAMSGD: after the window's last local step, the elastic exchange with x̃, from θᵢ as
        # that step left it (v takes no part).
        with tf.control_dependencies([local_step]):
            theta = [copy.read_value() for copy in local]
        elastic_forces, global_step_after = elastic_exchange(
            args, theta, centre, global_step, alpha=args.learning_rate * args.rho)
        # The worker's half of the exchange, once the ps has done its half: θᵢ ← θᵢ − E.
        with tf.control_dependencies([copy.assign_sub(force)
                                      for copy, force in zip(local, elastic_forces)]):
            local_step_and_commit = tf.identity(global_step_after)
        test_accuracy = net.accuracy(centre)
    return {"local_step": local_step, "local_step_and_commit": local_step_and_commit,
            "loss": loss, "images": images, "labels": labels, "global_step": global_step,
            "test_accuracy": test_accuracy, "centre": centre, "local": local,
            "velocity": velocity}


def nesterov_step(net, local, velocity, images, labels, learning_rate, momentum):
    """A local step, without talking to the ps: the gradient at the look-ahead point θᵢ + δ·v,
    then v ← δ·v − η·g and θᵢ ← θᵢ + v. Returns (the loss at the look-ahead point, the step)."""
    coasting = [momentum * v for v in velocity]
    look_ahead = [theta + coast for theta, coast in zip(local, coasting)]
    loss = net.loss(look_ahead, images, labels)
    gradients = tf.gradients(loss, look_ahead)
    moves = [v.assign(coast - learning_rate * g)
             for v, coast, g in zip(velocity, coasting, gradients)]
    return loss, tf.group(*[theta.assign_add(move) for theta, move in zip(local, moves)])


def elastic_exchange(args, local, centre, global_step, alpha):
    """The ps's half of an exchange, atomic: under one lock on the ps, which every write to x̃
    takes, read x̃, compute the elastic force E = α·(θᵢ − x̃) there, move x̃ ← x̃ + E and count
    the window's τ steps. No other exchange can change x̃ in between, so the force this worker
    receives is exactly the one x̃ got. θᵢ reaches the ps (one message) before the lock is
    taken: the lock never waits for the network; E comes back as one message too. Returns (E,
    the global step after it)."""
    message = pack(local)  # (packed here, on the worker)
    with tf.device("/job:ps/task:0"):
        arrived = unpack(tf.identity(message), centre)

    def exchange_under_lock():
        forces, moves = [], []
        for theta, x in zip(arrived, centre):
            with tf.device(x.device):
                force = alpha * (theta - x.read_value())
                forces.append(force)
                moves.append(x.assign_add(force))
        with tf.control_dependencies(moves):
            return pack(forces), tf.raw_ops.DeepCopy(x=global_step.assign_add(args.window))

    with tf.device("/job:ps/task:0"), tf.control_dependencies(arrived):
        lock = tf.CriticalSection(shared_name="elastic_exchange_lock",
                                  name="elastic_exchange_lock")
        forces, global_step_after = lock.execute(exchange_under_lock)
    return unpack(forces, centre), global_step_after  # (cut up here, on the worker)


def train(args, server, watchdog):
    graph = build_graph(args)
    with training_session(args, server, graph, watchdog) as (sess, loop):
        # global_step only moves at an exchange, so every worker ends on a full window.
        while loop.running():
            if (loop.local_steps + 1) % args.window:
                loss, _ = sess.run([graph["loss"], graph["local_step"]])
                loop.step(loss)
            else:  # EAMSGD: the window's last local step also exchanges the force with x̃
                loss, global_step = sess.run([graph["loss"], graph["local_step_and_commit"]])
                loop.step(loss, global_step)
    exchanges = loop.local_steps // args.window
    print("[%s] %d elastic exchanges with the centre variable, α = %g" % (
        loop.who, exchanges, args.learning_rate * args.rho), flush=True)
    return loop.report(exchanges=exchanges)


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


# -- The cluster, from the flags or TF_CONFIG -----------------------------------------------------
RETRYABLE_EXIT_CODE = 138  # "a peer was lost: start me again" (TFJob's ExitCode policy retries it)


def uses_parameter_servers():
    """False where the lesson sets PARAMETER_SERVERS = 0: the workers exchange among themselves."""
    return globals().get("PARAMETER_SERVERS", 1) > 0


def example_parser(doc, train_steps, learning_rate, batch_size=32, epilog=None):
    """The cluster's flags, then training's, with these defaults; the lesson adds its own."""
    parser = OneLineErrorParser(description=doc.split("\n\n")[0], epilog=epilog)
    cluster = parser.add_argument_group("cluster (default: %s, workers on localhost:2223,"
                                        "localhost:2224)" % ("one ps on localhost:2222"
                                                             if uses_parameter_servers()
                                                             else "no ps"))
    cluster.add_argument("--job_name", choices=["ps", "worker"],
                         help="this task's job: 'ps' holds the parameters, 'worker' trains")
    cluster.add_argument("--task_index", type=int,
                         help="this task's index within its job; worker 0 is the chief")
    cluster.add_argument("--ps_hosts", help="comma-separated host:port of every parameter server")
    cluster.add_argument("--worker_hosts", help="comma-separated host:port of every worker")
    cluster.add_argument("--timeout", type=float, default=60.0,
                         help="seconds without progress after which a task gives up on a peer "
                              "(one that never came up, died, froze or is cut off), exiting "
                              "with the retryable code %d" % RETRYABLE_EXIT_CODE)
    add_training_flags(parser, train_steps, learning_rate, batch_size)
    return parser


def parse_example_flags(parser, argv):
    """The command line (or TF_CONFIG), every mistake said before any server starts."""
    args = parser.parse_args(argv)
    check_training_flags(parser, args)
    args.cluster, args.job_name, args.task_index = cluster_from_flags(parser, args)
    check_log_dir(parser, args)
    return args


def cluster_from_flags(parser, args):
    """({'ps': [...], 'worker': [...]}, job_name, task_index) from the flags, or without them
    from TF_CONFIG (Kubeflow's TFJob; under Slurm, Cluster-Engines/slurm gives the flags)."""
    flags = {name: getattr(args, name) for name in ("job_name", "task_index", "ps_hosts",
                                                     "worker_hosts")}
    if all(value is None for value in flags.values()) and os.environ.get("TF_CONFIG"):
        flags = cluster_from_tf_config(parser, os.environ["TF_CONFIG"])
    elif flags["job_name"] is None or flags["task_index"] is None:  # who this is, said first
        flags = dict(flags, job_name=args.job_name or "worker", task_index=args.task_index or 0)
        print("[%s%d] no %s given: this task is %s %d" % (
            flags["job_name"], flags["task_index"], " or ".join(
                "--" + name for name in ("job_name", "task_index") if getattr(args, name) is None),
            flags["job_name"], flags["task_index"]), flush=True)
    job_name, task_index = flags["job_name"], flags["task_index"]
    defaults = {"ps": "localhost:2222" if uses_parameter_servers() else "",
                "worker": "localhost:2223,localhost:2224"}
    cluster = {}
    for job, default in defaults.items():
        given = flags[job + "_hosts"]
        cluster[job] = host_list(parser, job + " hosts", default if given is None else given)
    for job in ["worker"] + (["ps"] if uses_parameter_servers() else []):
        if not cluster[job]:
            parser.error("%s hosts: at least one host:port is needed" % job)
    if not uses_parameter_servers() and (cluster["ps"] or job_name == "ps"):
        parser.error("this example has no parameter server (the workers exchange among "
                     "themselves): start workers only, without ps hosts")
    if not 0 <= task_index < len(cluster[job_name]):
        parser.error("task index %d is out of range: there are %d %s task(s)"
                     % (task_index, len(cluster[job_name]), job_name))
    hosts = cluster["ps"] + cluster["worker"]
    if len(set(hosts)) < len(hosts):
        parser.error("host:port used by more than one task: %s" % ", ".join(
            sorted({host for host in hosts if hosts.count(host) > 1})))
    port = int(cluster[job_name][task_index].rpartition(":")[2])
    with socket.socket() as probe:
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("", port))
        except OSError:
            parser.error("port %d is already in use on this machine: stop what holds it or "
                         "pick another port" % port)
    return cluster, job_name, task_index


def host_list(parser, what, text):
    hosts = [host.strip() for host in text.split(",")] if text else []
    for host in hosts:
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit() or not 0 < int(port) < 65536:
            parser.error("%s: '%s' is not host:port with a port in 1-65535" % (what, host))
    return hosts


def cluster_from_tf_config(parser, text):
    """The flags from TF_CONFIG as Kubeflow's TFJob writes it; worker 0 is the chief and every
    worker evaluates, so chief, master and evaluator roles are refused, saying what to do."""
    try:
        tf_config = json.loads(text)
        if isinstance(tf_config, dict) and "sparseCluster" in tf_config:
            parser.error("TF_CONFIG has a sparseCluster (a TFJob with enableDynamicWorker): every "
                         "task needs the whole cluster here, so leave enableDynamicWorker off")
        cluster, task = tf_config["cluster"], tf_config["task"]
        roles = set(cluster) | {str(task["type"])}
        for role in sorted(roles & {"chief", "master"}):
            parser.error("TF_CONFIG: a '%s' job is not used here: worker 0 is the chief, so "
                         "declare it as one more worker (in a TFJob: no %s replica, Worker "
                         "replicas + 1)" % (role, role.capitalize()))
        if "evaluator" in roles:
            parser.error("unknown job name 'evaluator' in TF_CONFIG: every worker evaluates the "
                         "test set itself, so drop the TFJob's Evaluator replica")
        if roles - {"ps", "worker"}:
            parser.error("TF_CONFIG: only 'ps' and 'worker' jobs are used here (worker 0 is the "
                         "chief), got %s" % sorted(roles))
        return {"job_name": str(task["type"]), "task_index": int(task["index"]),
                "ps_hosts": ",".join(cluster.get("ps", [])),
                "worker_hosts": ",".join(cluster["worker"])}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        parser.error("TF_CONFIG must be JSON like {\"cluster\": {\"ps\": [...], \"worker\": "
                     "[...]}, \"task\": {\"type\": \"worker\", \"index\": 0}} (%s: %s)"
                     % (type(error).__name__, error))


def is_chief(args):
    return args.job_name == "worker" and args.task_index == 0


def task_name(job_name, task_index):
    return "%s%d" % (job_name, task_index)


def check_log_dir(parser, args):
    """The chief writes --log_dir: one that cannot hold a checkpoint is bad input, said now."""
    if not args.log_dir or not is_chief(args):
        return
    if os.path.exists(args.log_dir) and not os.path.isdir(args.log_dir):
        parser.error("--log_dir %s is a file, not a directory: name a directory" % args.log_dir)
    probe = os.path.join(args.log_dir, ".write-test-%d" % os.getpid())
    try:
        os.makedirs(args.log_dir, exist_ok=True)
        with open(probe, "w") as file:
            file.write("x" * 4096)
        os.remove(probe)
    except OSError as error:
        parser.error("--log_dir %s cannot be written (%s): name a writable directory with free "
                     "space" % (args.log_dir, error.strerror or error))


def claim_log_dir(args, who):
    """The chief locks --log_dir while it runs (two runs' checkpoints would interleave)."""
    if not args.log_dir or not is_chief(args):
        return True
    args.log_dir_lock = open(os.path.join(args.log_dir, ".lock"), "a+")
    try:
        fcntl.flock(args.log_dir_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        args.log_dir_lock.seek(0)
        print("[%s] error: --log_dir %s is in use by another run (%s): give each run its own "
              "--log_dir" % (who, args.log_dir, args.log_dir_lock.read().strip() or "running"),
              file=sys.stderr)
        return False
    args.log_dir_lock.truncate(0)
    args.log_dir_lock.write("pid %d on %s" % (os.getpid(), socket.gethostname()))
    args.log_dir_lock.flush()
    return True


def session_config(args):
    """Few threads, bounded waits, and no chatter with the other workers (without a ps, worker 0
    leads the collective ops and holds the end-of-run queues)."""
    config = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=2,
                            operation_timeout_in_ms=int(args.timeout * 1000),
                            device_filters=["/job:ps", "/job:%s/task:%d" % (args.job_name,
                                                                             args.task_index)])
    if not args.cluster["ps"]:
        config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
        config.device_filters.append("/job:worker/task:0")
    return config


# -- Liveness: who is silent, and for how long ----------------------------------------------------
class Watchdog:
    """Liveness by progress: a worker that waits --timeout s for a silent peer says which
    one and exits with the retryable code; it also sends the ps a heartbeat."""

    def __init__(self, args, server):
        self.args, self.server = args, server
        self.who = task_name(args.job_name, args.task_index)
        # The thread that makes the watchdog trains: main() does, and Linux numbers the main
        # thread with the process id (Python 3.8+ could ask threading.get_native_id()).
        self.trainer = "/proc/self/task/%d/schedstat" % os.getpid()
        self.progress_made = True
        self.reached = {"ps": set(), "worker": set()}  # tasks whose port took a connection
        self.stopped = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()
        self.heartbeat = threading.Thread(target=self._heartbeat, daemon=True)
        self.heartbeat.start()

    def progress(self):
        self.progress_made = True  # (a flag: this runs at every step, so it must cost nothing)

    def stop(self):
        """No more checks; the heartbeat's session closes before the process exits."""
        self.stopped.set()
        self.heartbeat.join(heartbeat_interval(self.args) + 5.0)

    def busy(self):
        """Seconds the training thread ran or waited for a CPU (schedstat; 0 if unreadable)."""
        try:
            with open(self.trainer) as schedstat:
                running, queued = schedstat.read().split()[:2]
            return (int(running) + int(queued)) / 1e9
        except (OSError, ValueError):
            return 0.0

    def _watch(self):
        everyone = {job: set(range(len(hosts))) for job, hosts in self.args.cluster.items()}
        waited, then, busy_then, said = 0.0, time.monotonic(), self.busy(), False
        while not self.stopped.wait(0.5):
            for job in everyone:  # (only to tell "never came up" apart, until all were seen)
                if self.reached[job] != everyone[job]:
                    self.reached[job] |= everyone[job] - set(unreachable(self.args.cluster, job))
            late = sorted(everyone["worker"] - self.reached["worker"])
            if waited > 5.0 and late and not said and not self.args.cluster["ps"]:
                print("[%s] waiting for %s to come up" % (
                    self.who, describe(self.args.cluster, "worker", late)), flush=True)
                said = True  # (with a ps, the ps and the chief are the ones waited for)
            now, busy_now = time.monotonic(), self.busy()
            waited = 0.0 if self.progress_made else waited + max(
                0.0, (now - then) - (busy_now - busy_then))
            self.progress_made, then, busy_then = False, now, busy_now
            if waited > self.args.timeout and not self.stopped.is_set():
                print("[%s] error: no progress for %.0f s (--timeout %g): %s" % (
                    self.who, waited, self.args.timeout,
                    why_stuck(self.args, self.reached, self.server)),
                    file=sys.stderr, flush=True)
                os._exit(RETRYABLE_EXIT_CODE)

    def _heartbeat(self):
        with tf.Graph().as_default():
            beats = [queue.enqueue((self.args.task_index, b"alive"))
                     for queue in status_queues(self.args.cluster)]
            sess = None
            while not self.stopped.wait(heartbeat_interval(self.args)):
                try:
                    # A new session only towards ps ports that take connections; an open one
                    # beats on its own connections (a port flooded by others may take no more).
                    if sess is None and beats and not unreachable(self.args.cluster, "ps"):
                        sess = tf.Session(self.server.target, config=session_config(self.args))
                    if sess is not None:
                        sess.run(beats)
                except tf.errors.OpError:
                    sess = None  # a restarted ps knows no old session: the next beat opens one
                    # (the old one is left open: closing a session whose ps is gone can block)
            if sess is not None:
                sess.close()


def heartbeat_interval(args):
    return min(max(args.timeout / 5.0, 0.2), 5.0)


def why_stuck(args, reached=None, server=None):
    """Which task is silent, and whether it never came up or stopped answering."""
    if getattr(args, "waiting_for_the_chief", False):  # (the ps may have given up on it too)
        return "the chief, %s, %s" % (describe(args.cluster, "worker", [0]), (
            "never came up (nothing listens on its port)" if 0 in unreachable(
                args.cluster, "worker") else "has not made θ ready"))
    down = unreachable(args.cluster, "ps")
    if down:  # a port that refused one connection may be busy: it is down if it refuses twice
        time.sleep(0.5)
        down = sorted(set(down) & set(unreachable(args.cluster, "ps")))
    if down:
        return "lost the parameter server: %s" % "; ".join(
            "%s %s" % (describe(args.cluster, "ps", [index]),
                       "stopped answering (its port takes no connection)"
                       if reached is None or index in reached["ps"]
                       else "never came up (nothing listens on its port)") for index in down)
    frozen = [index for index in range(len(args.cluster["ps"]))
              if server is not None and not answers(args, server, index)]
    if frozen:
        return ("lost the parameter server: %s accepts connections but does not answer (frozen "
                "or cut off)" % describe(args.cluster, "ps", frozen))
    silent = unreachable(args.cluster, "worker")
    if silent:
        return "not answering: %s" % "; ".join("%s%s" % (
            describe(args.cluster, "worker", [index]), " never came up (nothing listens on its "
            "port)" if reached is not None and index not in reached["worker"] else "")
            for index in silent)
    if not args.cluster["ps"]:
        return ("every worker accepts connections, so one that this one waits for (in a "
                "collective op or an exchange with a peer) is frozen or cut off")
    return ("every task accepts connections and the ps answers, so a worker that this one "
            "waits for is frozen or cut off: the ps's log names the one it no longer hears from")


def error_line(error):
    """The line of a TensorFlow error that says what went wrong (TF 1.x and 2.x)."""
    lines = [line.strip() for line in error.message.splitlines() if line.strip()]
    if lines and lines[0].startswith("Graph execution error"):
        after_node = [i + 1 for i, line in enumerate(lines) if line.startswith("Node: ")]
        lines = lines[after_node[-1] if after_node else 1:]
    remote = error.message.partition('"grpc_message":"')[2].rpartition('","grpc_status"')[0]
    lines = [remote] if remote else [line for line in lines if not line.startswith((
        "From /job:", "Additional GRPC error information"))]  # (a peer's error, relayed)
    return lines[0] if lines else type(error).__name__


def answers(args, server, ps_index, seconds=3.0):
    """Whether a ps task answers a small request within a few seconds (from a thread)."""
    answered = threading.Event()

    def ask():
        with tf.Graph().as_default():
            size = status_queues(args.cluster)[ps_index].size()
            with tf.Session(server.target, config=session_config(args)) as sess:
                sess.run(size, options=tf.RunOptions(timeout_in_ms=int(seconds * 1000)))
                answered.set()

    threading.Thread(target=ask, daemon=True).start()
    return answered.wait(seconds + 1.0)


def unreachable(cluster, job_name):
    """Indices of a job's tasks whose port accepts no connection."""
    import errno
    dead = []
    for index, host in enumerate(cluster[job_name]):
        name, _, port = host.rpartition(":")
        try:
            socket.create_connection((name, int(port)), timeout=1.0).close()
        except OSError as error:
            if error.errno not in (errno.EMFILE, errno.ENFILE):  # this process is out of file
                dead.append(index)  # descriptors (a connection flood): no news of the peer
    return dead


def describe(cluster, job_name, indices):
    return ", ".join("%s (%s)" % (task_name(job_name, index), cluster[job_name][index])
                     for index in indices)


def status_queues(cluster):
    """One queue per ps on which each worker says b"started", b"alive" and b"done"."""
    workers = len(cluster["worker"])
    queues = []
    for index in range(len(cluster["ps"])):
        with tf.device("/job:ps/task:%d" % index):
            queues.append(tf.FIFOQueue(16 * workers, [tf.int32, tf.string],
                                       shared_name="status_queue%d" % index,
                                       name="status_queue%d" % index))
    return queues


# -- The parameter server's lifecycle -------------------------------------------------------------
def ready_queue():
    """Closed by the chief once θ is ready: waiting workers wake up without polling."""
    with tf.device("/job:ps/task:0"):
        return tf.FIFOQueue(1, tf.int32, shared_name="ready_queue", name="ready_queue")


def run_parameter_server(args, server):
    """Serve θ until every worker is done and gone; name a worker lost for
    --timeout s (closed port or no heartbeat) or never started, and exit 1."""
    me = task_name("ps", args.task_index)
    everyone = set(range(len(args.cluster["worker"])))
    with tf.Graph().as_default():
        queue = status_queues(args.cluster)[args.task_index]
        waiting, dequeue = queue.size(), queue.dequeue()
        with tf.Session(server.target, config=session_config(args)) as sess:
            started, done, closed_since, heard, silent = set(), set(), {}, {}, set()
            while True:
                time.sleep(0.2)  # between looks at the ports and the queue
                # The ports first, then the queue: a worker whose port was already closed has
                # said all it ever will. Only this ps dequeues, so taking what size() counted
                # never waits. (Do not poll with a dequeue that times out: in TF 1.x one that
                # times out just as an item arrives can take the item, and it is lost.)
                down = set(unreachable(args.cluster, "worker"))
                for _ in range(sess.run(waiting)):
                    index, status = sess.run(dequeue)
                    heard[int(index)] = time.monotonic()
                    (done if status == b"done" else started).add(int(index))
                    all_done_at = time.time()
                if done == everyone:
                    if down == everyone or time.time() - all_done_at > args.timeout:
                        break
                    continue
                closed_since = {index: closed_since.get(index, time.monotonic())
                                for index in (down & started) - done}
                frozen = {index for index in started - done - down
                          if time.monotonic() - heard[index] > args.timeout}
                for index in sorted(frozen - silent):
                    print("[%s] %s stopped answering: no heartbeat for %g s (--timeout), yet "
                          "its port is open (frozen or cut off)"
                          % (me, describe(args.cluster, "worker", [index]), args.timeout),
                          file=sys.stderr, flush=True)
                silent = frozen
                lost = sorted(frozen | {index for index, since in closed_since.items()
                                        if time.monotonic() - since > args.timeout})
                never_up = sorted(everyone - started - done)
                if lost and len(done) + len(lost) == len(everyone):
                    # The first to go silent is named first: the others may have given up
                    # waiting for it (a synchronous chief cannot finish without it).
                    went = {**closed_since, **{index: heard[index] for index in frozen}}
                    first, *after = sorted(lost, key=went.get)
                    how = {index: "frozen or cut off" if index in frozen else "its port closed"
                           for index in lost}
                    then = ", ".join("%s (%s)" % (describe(args.cluster, "worker", [index]),
                                                  how[index]) for index in after)
                    print("[%s] error: %s stopped without finishing%s; %d of %d workers "
                          "finished" % (me, describe(args.cluster, "worker", [first]),
                                        " first (%s), then %s" % (how[first], then) if after
                                        else "", len(done), len(everyone)), file=sys.stderr)
                    return 1
                if never_up and time.time() - STARTED > args.timeout and (
                        run_already_complete(args)):
                    print("[%s] the run is already complete (--log_dir %s reached --train_steps "
                          "%d): exiting" % (me, args.log_dir, args.train_steps), flush=True)
                    return 0
                if never_up and time.time() - STARTED > args.timeout:
                    print("[%s] error: %s never came up within %g s (--timeout)"
                          % (me, describe(args.cluster, "worker", never_up), args.timeout),
                          file=sys.stderr)
                    return 1
    print("[%s] all %d worker%s done; exiting (%.2f s of CPU time)"
          % (me, len(everyone), " is" if len(everyone) == 1 else "s are", time.process_time()),
          flush=True)
    return 0


def tell_parameter_servers(args, server, status):
    """Enqueue (this worker, status) on every ps, retried until the ps is up."""
    if not args.cluster["ps"]:
        return
    with tf.Graph().as_default():
        enqueues = [queue.enqueue((args.task_index, status))
                    for queue in status_queues(args.cluster)]
        said, since = False, time.monotonic()
        while True:
            while unreachable(args.cluster, "ps"):
                if not said and time.monotonic() - since > 5.0:
                    print("[%s] waiting for %s to come up" % (
                        task_name("worker", args.task_index),
                        describe(args.cluster, "ps", unreachable(args.cluster, "ps"))),
                        flush=True)
                    said = True
                time.sleep(0.05)
            try:
                with tf.Session(server.target, config=session_config(args)) as sess:
                    return sess.run(enqueues)
            except tf.errors.UnavailableError:
                time.sleep(0.1)


def wait_until_chief_is_ready(args, server):
    """A non-chief worker blocks on the ready queue until the chief closes it."""
    waiting = threading.Timer(5.0, lambda: print("[%s] waiting for the chief, %s, to make θ "
                                                 "ready" % (task_name("worker", args.task_index),
                                                            describe(args.cluster, "worker",
                                                                     [0])), flush=True))
    with tf.Graph().as_default():
        dequeue = ready_queue().dequeue()
        with tf.Session(server.target, config=session_config(args)) as sess:
            waiting.start()
            args.waiting_for_the_chief = True  # (why_stuck names the chief meanwhile)
            try:
                sess.run(dequeue)
            except tf.errors.OutOfRangeError:
                pass
            finally:
                waiting.cancel()
            args.waiting_for_the_chief = False  # (still true for the message of a timeout)


def run_already_complete(args):
    """Whether --log_dir's newest checkpoint has reached --train_steps."""
    path = args.log_dir and tf.train.latest_checkpoint(args.log_dir)
    try:
        return bool(path) and tf.train.load_checkpoint(path).get_tensor(
            "global_step") >= args.train_steps
    except (tf.errors.OpError, ValueError):
        return False


def theta_on_the_ps(args, server, uninitialized=None):
    """Whether the ps already holds an initialized θ, saying so if it does."""
    if uninitialized is None:
        uninitialized = tf.report_uninitialized_variables(tf.global_variables())
    with tf.Session(server.target, config=session_config(args)) as probe:
        if len(probe.run(uninitialized)):
            return False
        print("[worker0] θ is live on the ps at global step %d: joining it (nothing is "
              "initialized or restored)" % probe.run(tf.train.get_global_step()), flush=True)
    return True


# -- Sessions: the chief initializes, restores or joins θ -----------------------------------------
@contextlib.contextmanager
def training_session(args, server, graph, watchdog, hooks=(), scaffold=None, config=None):
    """A MonitoredSession with the lifecycle every example shares; yields (sess, loop)."""
    hooks, scaffold = list(hooks), scaffold or tf.train.Scaffold()
    config = config or session_config(args)
    if is_chief(args):
        hooks.append(CloseReadyQueueHook())
        if args.log_dir:
            hooks.append(SaveAtTheEndHook(args.log_dir, scaffold=scaffold,
                                          save_steps=args.checkpoint_every))
        creator = ChiefSessionCreator(args, server, scaffold, config, hooks)
    else:
        creator = AfterTheChiefSessionCreator(args, server, scaffold, config)
    session = tf.train.MonitoredSession(session_creator=creator, hooks=hooks)
    with session as sess:
        loop = TrainingLoop(args, sess, graph, watchdog)
        try:
            yield sess, loop
        finally:
            for hook in hooks:
                getattr(hook, "stop", lambda: None)()
        loop.finish()
    tell_parameter_servers(args, server, b"done")


class ChiefSessionCreator(tf.train.SessionCreator):
    """The chief's session: it joins a live θ, or restores or initializes one."""

    def __init__(self, args, server, scaffold, config, hooks=()):
        self.args, self.server, self.scaffold, self.config = args, server, scaffold, config
        self.hooks = hooks

    def create_session(self):
        tell_parameter_servers(self.args, self.server, b"started")  # (see AfterTheChief...)
        self.scaffold.finalize()
        if theta_on_the_ps(self.args, self.server, self.scaffold.ready_for_local_init_op):
            for hook in self.hooks:
                getattr(hook, "chief_joined", lambda: None)()
            return tf.train.WorkerSessionCreator(self.scaffold, self.server.target,
                                                 self.config).create_session()
        return tf.train.ChiefSessionCreator(
            self.scaffold, self.server.target, self.config,
            checkpoint_filename_with_path=newest_intact_checkpoint(self.args)).create_session()


class AfterTheChiefSessionCreator(tf.train.SessionCreator):
    """A non-chief's session, made once the chief has θ ready."""

    def __init__(self, args, server, scaffold, config):
        self.args, self.server = args, server
        self.worker = tf.train.WorkerSessionCreator(scaffold, server.target, config)

    def create_session(self):
        # "started" to every ps at each (re-)created session, before the wait: a restarted ps
        # that hears nothing from a worker within --timeout of its own start calls it never up,
        # and the chief's restore may take that long (TF 2.x, a loaded machine).
        tell_parameter_servers(self.args, self.server, b"started")
        wait_until_chief_is_ready(self.args, self.server)
        return self.worker.create_session()


class CloseReadyQueueHook(tf.train.SessionRunHook):
    """Closes the ready queue once the chief's session holds θ."""

    def __init__(self):
        queue = ready_queue()
        self._is_closed, self._close = queue.is_closed(), queue.close()

    def after_create_session(self, session, coord):
        if not session.run(self._is_closed):
            session.run(self._close)


# -- Checkpoints ----------------------------------------------------------------------------------
class SaveAtTheEndHook(tf.train.CheckpointSaverHook):
    """A checkpoint every --checkpoint_every global steps, and always one at the end."""

    def end(self, session):
        self._timer.reset()  # (the step of the last save is forgotten: end() saves)
        super().end(session)


def newest_intact_checkpoint(args):
    """The newest checkpoint whose every tensor reads back; damaged ones are skipped."""
    state = args.log_dir and tf.train.get_checkpoint_state(args.log_dir)
    if not state:
        return None
    for path in reversed(list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]):
        try:
            reader = tf.train.NewCheckpointReader(path)
            for name in reader.get_variable_to_shape_map():
                reader.get_tensor(name)
            print("[worker0] resuming from %s" % path, flush=True)
            return path
        except (tf.errors.OpError, ValueError, RuntimeError, IndexError) as error:
            # (TF 2.x raises IndexError for a truncated data file, TF 1.15 DataLossError)
            print("[worker0] checkpoint %s is damaged (%s); trying the one before"
                  % (path, str(error).splitlines()[0][:120]), file=sys.stderr, flush=True)
    print("[worker0] no intact checkpoint in %s: starting from the initial θ" % args.log_dir,
          file=sys.stderr, flush=True)
    return None


# -- The training loop's bookkeeping --------------------------------------------------------------
class TrainingLoop:
    """The loop's bookkeeping: the global step, the watchdog's tick, --step_delay, a
    progress line and an accuracy point every --log_every steps (TensorBoard with --log_dir)."""

    def __init__(self, args, sess, graph, watchdog):
        self.args, self.sess, self.graph, self.watchdog = args, sess, graph, watchdog
        self.who = task_name("worker", args.task_index)
        self.first_global_step = self.global_step = sess.run(graph["global_step"])
        self.local_steps, self.curve, self.slept = 0, [], 0.0
        self.losses = collections.deque(maxlen=args.log_every)
        self.summaries = (tf.summary.FileWriter(os.path.join(args.log_dir, self.who))
                          if args.log_dir else None)
        self.started = time.time()
        if self.global_step >= args.train_steps:
            print("[%s] this run is already complete: global step %d >= --train_steps %d%s; "
                  "nothing to train" % (self.who, self.global_step, args.train_steps,
                                         " (from --log_dir %s)" % args.log_dir
                                         if args.log_dir else ""), flush=True)

    def running(self):
        return self.global_step < self.args.train_steps

    def step(self, loss, global_step=None):
        """One session.run of local steps done: their losses, and the global step after it."""
        losses = np.ravel(loss)
        if global_step is not None:
            self.global_step = global_step
        self.watchdog.progress()
        logged = self.local_steps // self.args.log_every
        self.local_steps += len(losses)
        self.losses.extend(losses)
        if not np.isfinite(losses).all():
            print("[%s] error: the loss is %s at local step %d (global %d): lower "
                  "--learning_rate, or check load_data and model" % (
                      self.who, losses[~np.isfinite(losses)][0], self.local_steps,
                      self.global_step), file=sys.stderr, flush=True)
            raise SystemExit(1)
        if self.args.step_delay:  # (as slept, in RESULT: tools/emulate checks it)
            slept = time.monotonic()
            time.sleep(self.args.step_delay * len(losses))
            self.slept += time.monotonic() - slept
        if self.local_steps // self.args.log_every > logged:
            self.log(self.sess.run(self.graph["test_accuracy"]))

    def log(self, test_accuracy):
        """A progress line, a point of the accuracy curve and of TensorBoard's."""
        self.curve.append([round(time.time(), 3), int(self.global_step),
                           round(float(test_accuracy), 4)])
        self.to_tensorboard(test_accuracy)
        print("[%s] step %d (global %d) loss %.4f test accuracy %.4f %.0f steps/s"
              % (self.who, self.local_steps, self.global_step, np.mean(self.losses),
                 test_accuracy, self.local_steps / (time.time() - self.started)), flush=True)

    def exchanged(self, global_step):
        """An exchange with the ps that is not a local step: its global step."""
        self.global_step = global_step
        self.watchdog.progress()

    def finish(self):
        self.test_accuracy, self.global_step = self.sess.run(
            [self.graph["test_accuracy"], self.graph["global_step"]])
        if self.curve or not self.losses:
            self.to_tensorboard(self.test_accuracy)
        else:  # a run shorter than --log_every: one progress line all the same
            self.log(self.test_accuracy)
        if self.summaries:
            self.summaries.close()

    def to_tensorboard(self, test_accuracy):
        if self.summaries and self.losses:
            self.summaries.add_summary(tf.Summary(value=[
                tf.Summary.Value(tag="loss", simple_value=float(np.mean(self.losses))),
                tf.Summary.Value(tag="test_accuracy", simple_value=float(test_accuracy))]),
                global_step=int(self.global_step))
            self.summaries.flush()  # a process that the watchdog ends loses nothing written

    def report(self, **algorithm_fields):
        if self.args.step_delay:
            algorithm_fields["slept_seconds"] = round(self.slept, 3)
        report(self.args, self.who, self.local_steps, self.first_global_step, self.global_step,
               self.losses, self.test_accuracy, self.curve, self.started, **algorithm_fields)
        return 0


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


# -- Tensors in one message -----------------------------------------------------------------------
def pack(tensors):
    """Tensors as one flat vector (the inverse of unpack)."""
    return tf.concat([tf.reshape(tensor, [-1]) for tensor in tensors], axis=0)


def unpack(vector, like):
    """Tensors shaped like the variables `like`, cut from a vector that pack made."""
    pieces = tf.split(vector, [variable.shape.num_elements() for variable in like])
    return [tf.reshape(piece, variable.shape) for piece, variable in zip(pieces, like)]


# -- main -----------------------------------------------------------------------------------------
def take_the_hard_descriptor_limit():
    """A gRPC server out of file descriptors stops serving (TF 1.15): raise the soft limit."""
    import resource  # (here, not at the top: the lesson's imports are the lesson's)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # an unlimited hard limit is above the kernel's nr_open
        pass


def main(argv=None):
    args = parse_flags(argv)
    who = task_name(args.job_name, args.task_index)
    if not (check_model_and_data(args, who, len(args.cluster["worker"]))
            and claim_log_dir(args, who)):
        return 2
    take_the_hard_descriptor_limit()
    server = tf.train.Server(tf.train.ClusterSpec(args.cluster), job_name=args.job_name,
                             task_index=args.task_index, config=session_config(args))
    if args.job_name == "ps":
        return run_parameter_server(args, server)
    watchdog = Watchdog(args, server)
    try:
        # "started" at once, before a session that may wait for the chief, so that the ps
        # accounts for a worker that dies while it waits.
        tell_parameter_servers(args, server, b"started")
        return train(args, server, watchdog)
    except tf.errors.AbortedError as error:  # a monitored session re-creates itself instead
        print("[%s] error: a ps was restarted under this worker's session, which cannot be "
              "re-created here; start this worker again (%s)" % (who, error_line(error)),
              file=sys.stderr)
        return RETRYABLE_EXIT_CODE
    except (tf.errors.ResourceExhaustedError, tf.errors.PermissionDeniedError,
            tf.errors.FailedPreconditionError) as error:
        if not args.log_dir or args.log_dir not in error.message:
            raise
        print("[%s] error: --log_dir %s cannot take a checkpoint (%s): free space or fix its "
              "permissions, then start this worker again" % (who, args.log_dir,
                                                             error_line(error)),
              file=sys.stderr)
        return 1
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError) as error:
        print("[%s] error: %s (%s)" % (who, why_stuck(args, watchdog.reached, server),
                                       error_line(error)), file=sys.stderr)
        return RETRYABLE_EXIT_CODE
    finally:
        watchdog.stop()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
