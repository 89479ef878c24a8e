"""Multiple-GPUs-Single-Machine/: one ps on the CPU, one worker per GPU (or the CPU)."""
import json
import re
import sys

import pytest

from helpers import example, results_in, run_script

SH = example("Multiple-GPUs-Single-Machine/dist_mult_gpu_sing_mach.sh")


def devices_logged(text, worker):
    line = re.search(r"^\[worker%d\] devices used by one step: (.*)$" % worker, text, re.M)
    return json.loads(line.group(1))


@pytest.mark.tf2
def test_without_a_gpu_it_says_so_once_and_trains_on_the_cpu():
    # Each worker logs where its first step ran. --step_delay holds each to 50 steps/s, so that
    # worker 0 alone cannot end the run (600 steps: 12 s) before a worker 1 that started late
    # has made a step; one that started later still (seen on TF 2.x at load 17: after the last
    # step) made none, and has no step to log.
    code, text = run_script(["bash", SH, "--train_steps", "600", "--step_delay", "0.02"],
                            env={"PYTHON": sys.executable, "GPUS": "0"})
    assert code == 0, text
    assert text.count("no GPU found") == 1
    results = results_in(text)
    assert len(results) == 2
    assert all(r["test_accuracy"] >= 0.93 for r in results), results
    assert "[ps0] all 2 workers are done" in text
    trained = [r["task_index"] for r in results if r["local_steps"] > 0]
    assert 0 in trained, results
    for worker in trained:
        devices = devices_logged(text, worker)
        # The forward/backward pass ran on this worker, the update on the ps.
        assert devices["MatMul"] == ["/job:worker/replica:0/task:%d/device:CPU:0" % worker]
        assert devices["ApplyGradientDescent"] == ["/job:ps/replica:0/task:0/device:CPU:0"]


def test_each_worker_is_given_its_own_gpu():
    code, text = run_script(["bash", SH, "--train_steps", "100"],
                            env={"PYTHON": sys.executable, "GPUS": "2", "WORKERS": "3"})
    assert code == 0, text
    for worker, visible in ((0, "0"), (1, "1"), (2, "0")):
        assert re.search(r"^\[worker%d\] CUDA_VISIBLE_DEVICES=%s: " % (worker, visible), text,
                         re.M), text


@pytest.mark.parametrize("soft", [True, False], ids=["soft placement", "without it"])
def test_on_a_machine_without_a_gpu_the_gpu_graph_runs_only_with_soft_placement(soft):
    """The worker's graph asks for GPU:0 where it sees a GPU; the session's soft placement is
    what lets the same graph run where an op (or the whole worker) has no GPU kernel. Here the
    script is told it sees one: a step runs with the script's config, and fails without."""
    from helpers import load_example
    from test_asynchronous import SERVERS, cluster_flags, worker_args
    module = load_example("Multiple-GPUs-Single-Machine/dist_mult_gpu_sing_mach.py")
    if module.visible_gpus():
        pytest.skip("a GPU is visible: the placement test above runs on it")
    tf = module.tf
    args = worker_args(module, cluster_flags(1), 0)
    spec = tf.train.ClusterSpec(args.cluster)
    SERVERS.append(tf.train.Server(spec, job_name="ps", task_index=0))
    worker = tf.train.Server(spec, job_name="worker", task_index=0,
                             config=module.session_config(args))
    SERVERS.append(worker)
    module.visible_gpus = lambda: ["/physical_device:GPU:0 (pretended)"]
    with tf.Graph().as_default():
        built = module.build_graph(args)
        assert "device:GPU:0" in built["loss"].device
        config = module.gpu_session_config(args)
        config.allow_soft_placement = soft
        initialize = tf.global_variables_initializer()
        with tf.Session(worker.target, config=config) as sess:
            if soft:
                sess.run(initialize)
                assert sess.run(built["train_op"]) == 1
            else:
                with pytest.raises(tf.errors.InvalidArgumentError, match="GPU"):
                    sess.run(initialize)
