"""What Hogwild's missing lock costs and saves, measured on a real ps and real worker processes.

Hogwild applies θ ← θ − η·g on the ps without a lock (TensorFlow's default), so two workers'
updates of the same variable can interleave, and part of one can be overwritten by the other.
This tool measures both sides of that trade:

1. Updates lost: each worker applies a known update (g = 1 everywhere, η = 1) to one shared
   variable on the ps, --updates times, with and without use_locking. Afterwards every element
   should have moved by exactly workers × updates; the shortfall is the fraction of updates
   that another worker's update overwrote.
2. Training: Hogwild/Hogwild.py with and without --use_locking on the same cluster, steps/s of
   all workers together and the test accuracy reached (tools/launch.py's LocalCluster).

    python tools/hogwild_contrast.py [--workers 2] [--updates 2000] [--size 100000] [--repeats 3]
"""
import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch import LocalCluster, free_ports  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOGWILD = os.path.join(ROOT, "Hogwild", "Hogwild.py")

# One task of the lost-update cluster: the ps holds a zero vector; each worker applies -1 to
# every element, --updates times, and the chief prints how far the vector moved.
TASK = r'''
import sys, time
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()
job, index, ps, workers, size, updates, locking = sys.argv[1:8]
index, size, updates, locking = int(index), int(size), int(updates), locking == "1"
cluster = tf.train.ClusterSpec({"ps": [ps], "worker": workers.split(",")})
server = tf.train.Server(cluster, job_name=job, task_index=index)
with tf.device("/job:ps/task:0"):
    shared = tf.Variable(tf.zeros([size]), name="shared")
    done = tf.Variable(0, name="done")
if job == "ps":
    server.join()
with tf.device("/job:worker/task:%d" % index):
    ones = tf.ones([size])
step = tf.train.GradientDescentOptimizer(1.0, use_locking=locking).apply_gradients(
    [(ones, shared)])
finished = tf.assign_add(done, 1, use_locking=True)
with tf.Session(server.target) as sess:
    if index == 0:
        sess.run(tf.global_variables_initializer())
    else:
        while True:
            try:
                sess.run(done)
                break
            except tf.errors.FailedPreconditionError:
                time.sleep(0.01)
    for _ in range(updates):
        sess.run(step)
    sess.run(finished)
    if index == 0:
        while sess.run(done) < len(workers.split(",")):
            time.sleep(0.01)
        moved = -sess.run(shared)
        print("MOVED %f %f" % (moved.mean(), moved.min()))
'''


def lost_updates(workers, updates, size, locking):
    """Fraction of the workers' updates that did not land, measured once."""
    ports = free_ports(workers + 1)
    ps, hosts = "localhost:%d" % ports[0], ",".join("localhost:%d" % p for p in ports[1:])
    common = [hosts, str(size), str(updates), "1" if locking else "0"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    server = subprocess.Popen([sys.executable, "-c", TASK, "ps", "0", ps] + common, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        tasks = [subprocess.Popen([sys.executable, "-c", TASK, "worker", str(i), ps] + common,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  start_new_session=True) for i in range(workers)]
        outputs = [task.communicate(timeout=600)[0].decode() for task in tasks]
    finally:
        server.kill()
        server.wait()
    moved = [line.split() for line in outputs[0].splitlines() if line.startswith("MOVED ")]
    assert moved, "the chief printed no MOVED line:\n" + outputs[0]
    mean_moved = float(moved[0][1])
    return 1.0 - mean_moved / (workers * updates)


def training(workers, locking, train_steps):
    """(steps/s of all workers together, test accuracy) of one Hogwild run."""
    args = ["--train_steps", str(train_steps)] + (["--use_locking"] if locking else [])
    cluster = LocalCluster(HOGWILD, workers=workers, args=args, echo=False)
    try:
        cluster.start()
        assert cluster.wait(600), cluster.returncodes()
    finally:
        cluster.stop()
    results = [r for r in cluster.results() if r["job"] == "worker"]
    return (sum(r["steps_per_second"] for r in results),
            max(r["test_accuracy"] for r in results))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--updates", type=int, default=2000,
                        help="updates per worker in the lost-update measurement")
    parser.add_argument("--size", type=int, default=100000,
                        help="elements of the shared variable (larger: longer updates, more "
                             "chances to overlap)")
    parser.add_argument("--train_steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args(argv)
    lost, runs = {False: [], True: []}, {False: [], True: []}
    for _ in range(options.repeats):  # interleaved, so that a busy minute hurts both alike
        for locking in (False, True):
            lost[locking].append(lost_updates(options.workers, options.updates, options.size,
                                              locking))
            runs[locking].append(training(options.workers, locking, options.train_steps))
    print("| use_locking | updates lost (median, min–max of %d) | steps/s together | test "
          "accuracy |" % options.repeats)
    print("|---|---|---|---|")
    for locking in (False, True):
        speeds = [speed for speed, _ in runs[locking]]
        print("| %s | %.2f %% (%.2f–%.2f %%) | %.0f (%.0f–%.0f) | %.4f |" % (
            locking, 100 * statistics.median(lost[locking]), 100 * min(lost[locking]),
            100 * max(lost[locking]), statistics.median(speeds), min(speeds), max(speeds),
            statistics.median(accuracy for _, accuracy in runs[locking])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
