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
    code, text = run_script(["bash", SH], env={"PYTHON": sys.executable, "GPUS": "0"})
    assert code == 0, text
    assert text.count("no GPU found") == 1
    results = results_in(text)
    assert len(results) == 2
    assert all(r["test_accuracy"] >= 0.93 for r in results), results
    assert "[ps0] all 2 workers are done" in text
    for worker in (0, 1):
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
