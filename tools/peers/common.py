"""What every peer shares with the examples: the data, the split, the shards, the model, θ₀, the
flags and the RESULT line. NumPy only, so that each peer imports its own framework and nothing
else: these mirror the examples' load_data, model (its θ₀), worker_batches and report, and
tests/test_peers.py checks that they agree.
"""
import argparse
import json
import os
import socket
import time

import numpy as np

TEST_SIZE = 360  # load_data(): the first 360 (a fifth) of the seeded permutation are the test set
HIDDEN, CLASSES = 128, 10


def parser(doc, train_steps, learning_rate, batch_size=32):
    """The examples' training flags, with the same names and meaning."""
    result = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    result.add_argument("--train_steps", type=int, default=train_steps,
                        help="when training stops (what it counts is the peer's docstring's)")
    result.add_argument("--batch_size", type=int, default=batch_size, help="per worker")
    result.add_argument("--learning_rate", type=float, default=learning_rate)
    result.add_argument("--workers", type=int, default=2)
    result.add_argument("--seed", type=int, default=0)
    result.add_argument("--log_every", type=int, default=100,
                        help="local steps between two test-accuracy points of the curve")
    return result


def load_digits(seed):
    """(train_images, train_labels), (test_images, test_labels), as the examples' load_data()."""
    from sklearn.datasets import load_digits as sklearn_digits
    digits = sklearn_digits()
    images, labels = digits.data / 16.0, digits.target
    order = np.random.RandomState(seed).permutation(len(images))
    test, train = order[:TEST_SIZE], order[TEST_SIZE:]
    splits = (images[train], labels[train]), (images[test], labels[test])
    return [(x.astype(np.float32), y.astype(np.int64)) for x, y in splits]


def shard(images, labels, worker, workers):
    """Worker `worker`'s part of the training set, as in worker_batches: every workers-th row."""
    return images[worker::workers], labels[worker::workers]


def batch_indices(size, batch_size, seed):
    """Endless minibatches of row indices into a shard: a new shuffle every epoch and batches
    that run across epochs, as worker_batches' shuffle(whole shard, seed).repeat().batch()."""
    rng = np.random.RandomState(seed)
    pending = np.empty(0, np.int64)
    while True:
        while len(pending) < batch_size:
            pending = np.concatenate([pending, rng.permutation(size)])
        yield pending[:batch_size]
        pending = pending[batch_size:]


def initial_parameters(inputs, classes, seed, hidden=128):
    """[(name, value)] of the examples' default model() at θ₀: Glorot-uniform weights and zero
    biases drawn with NumPy from the seed, in the order model() draws them."""
    draw = np.random.RandomState(seed).uniform

    def glorot(fan_in, fan_out):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        return draw(-limit, limit, (fan_in, fan_out)).astype(np.float32)

    return [("hidden_weights", glorot(inputs, hidden)),
            ("hidden_biases", np.zeros(hidden, np.float32)),
            ("output_weights", glorot(hidden, classes)),
            ("output_biases", np.zeros(classes, np.float32))]


def accuracy(params, images, labels):
    """Test accuracy of θ = (W1, b1, W2, b2) as NumPy arrays, the examples' forward pass."""
    hidden_weights, hidden_biases, output_weights, output_biases = params
    hidden = np.maximum(images @ hidden_weights + hidden_biases, 0)
    return float(np.mean(np.argmax(hidden @ output_weights + output_biases, 1) == labels))


def free_port(host="127.0.0.1"):
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def say(line, lock=None):
    """One whole line on stdout; with `lock` (shared by processes that write to the same pipe),
    never mixed with another process's line: a pipe keeps only writes of ≤ 4 KiB whole."""
    if lock is None:
        print(line, flush=True)
        return
    with lock:
        print(line, flush=True)


def report(algorithm, who, workers, global_step, local_steps, test_accuracy, curve, started,
           lock=None, **fields):
    """The examples' RESULT line, with the fields the benchmark reads."""
    seconds = time.time() - started
    result = {"algorithm": algorithm, "job": "worker", "workers": workers,
              "global_step": int(global_step), "local_steps": int(local_steps),
              "test_accuracy": round(float(test_accuracy), 4),
              "wall_seconds": round(seconds, 3),
              "steps_per_second": round(local_steps / seconds, 1) if seconds > 0 else None,
              "cpu_seconds": round(time.process_time(), 2), "curve": curve, "pid": os.getpid()}
    result.update(fields)
    say("[%s] RESULT %s" % (who, json.dumps(result)), lock)
