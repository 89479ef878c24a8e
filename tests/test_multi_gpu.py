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
