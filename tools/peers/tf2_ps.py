"""TensorFlow 2's ParameterServerStrategy with a ClusterCoordinator: the TF2 peer of Hogwild and AGN.

What a user of TensorFlow 2 would write instead of Hogwild/Hogwild.py: one ps and M workers, each
a tf.distribute.Server in its own process on localhost (started by this script), and this process
as the coordinator, which schedules --train_steps step functions; each runs on whichever worker is
free, reads θ from the ps, computes the gradient of one minibatch and steps θ on the ps at once,
without waiting for the other workers (asynchronous, as Hogwild):

    θ ← θ − η·g        (on the ps, once per scheduled step; global_step += 1)

--train_steps counts the steps of all workers together, as in Hogwild.py and AGN.py. The same
problem as the examples (tools/peers/common.py): digits, the seeded split, the 64→128→10 ReLU MLP
from the examples' θ₀, plain SGD at η = 0.1 and batch 32 per step. One difference that the
strategy imposes: it traces the dataset function once for every worker (its input_pipeline_id is
always 0), so a worker cannot pick its shard images[i::M]; each worker shuffles the whole training
set (both shards) in its own order instead, as TensorFlow's ParameterServerStrategy tutorial does.
Run it with the TensorFlow 2 environment (bash setup.sh --tf2):
    .venv-tf2/bin/python tools/peers/tf2_ps.py [--train_steps 1000] [--workers 2]
The coordinator prints one RESULT line for all workers (it cannot tell which worker ran a step).
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from launch import die_with_parent  # noqa: E402  (each task: its own group, ended with us)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ALGORITHM = "tf2-parameter-server-strategy"


def serve(cluster, job, index):
    """One ps or worker task: a gRPC server that runs what the coordinator sends it."""
    import tensorflow as tf
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job,
                                  task_index=index, protocol="grpc", start=True)
    server.join()


def start_servers(workers):
    """The ps and the workers as subprocesses (own process groups); returns (cluster, processes)."""
    ports = [common.free_port() for _ in range(workers + 1)]
    cluster = {"ps": ["127.0.0.1:%d" % ports[0]],
               "worker": ["127.0.0.1:%d" % port for port in ports[1:]]}
    processes = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", job,
                                   str(index), json.dumps(cluster)], preexec_fn=die_with_parent,
                                  stdin=subprocess.DEVNULL)
                 for job, index in [("ps", 0)] + [("worker", i) for i in range(workers)]]
    return cluster, processes


def stop_servers(processes):
    for process in processes:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def train(args, cluster):
    import tensorflow as tf
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), rpc_layer="grpc")
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    (train_x, train_y), (test_x, test_y) = common.load_digits(args.seed)
    with strategy.scope():
        params = [tf.Variable(value, name=name) for name, value in
                  common.initial_parameters(train_x.shape[1], common.CLASSES, args.seed)]
        global_step = tf.Variable(0, dtype=tf.int64, name="global_step")

    def dataset_fn():
        return (tf.data.Dataset.from_tensor_slices((train_x, train_y))
                .shuffle(len(train_x)).repeat().batch(args.batch_size))

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    learning_rate = args.learning_rate

    @tf.function
    def train_step(iterator):
        def replica_fn(images, labels):
            with tf.GradientTape() as tape:
                hidden = tf.nn.relu(tf.matmul(images, params[0]) + params[1])
                logits = tf.matmul(hidden, params[2]) + params[3]
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=labels, logits=logits))
            for variable, gradient in zip(params, tape.gradient(loss, params)):
                variable.assign_sub(learning_rate * gradient)
            global_step.assign_add(1)
            return loss
        images, labels = next(iterator)
        return strategy.run(replica_fn, args=(images, labels))

    def accuracy():
        return common.accuracy([variable.numpy() for variable in params], test_x, test_y)

    curve, next_point = [], args.log_every
    started = time.time()
    for _ in range(args.train_steps):
        coordinator.schedule(train_step, args=(iterator,))
    last_step, last_progress = -1, time.time()
    while True:  # a point of the curve each time the global step passes a --log_every mark
        step = int(global_step.numpy())
        if step != last_step:
            last_step, last_progress = step, time.time()
        elif time.time() - last_progress > 120:
            coordinator.join()  # raises the workers' error, if that is why
            raise RuntimeError("no step for 120 s, at global step %d" % step)
        if step >= next_point:
            point = [round(time.time(), 3), step, round(accuracy(), 4)]
            curve.append(point)
            print("[coordinator] global step %d test accuracy %.4f" % tuple(point[1:]),
                  flush=True)
            next_point = (step // args.log_every + 1) * args.log_every
        if step >= args.train_steps:
            break
        time.sleep(0.01)
    coordinator.join()
    common.report(ALGORITHM, "coordinator", args.workers, int(global_step.numpy()),
                  args.train_steps, accuracy(), curve, started, job="coordinator",
                  tensorflow=tf.__version__)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        serve(json.loads(argv[3]), argv[1], int(argv[2]))
        return 0
    args = common.parser(__doc__, train_steps=1000, learning_rate=0.1).parse_args(argv)
    cluster, processes = start_servers(args.workers)
    try:
        train(args, cluster)
    finally:
        stop_servers(processes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
