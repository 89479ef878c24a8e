"""Non-Distributed_Setup.py: the one-process reference."""
import sys

import pytest

from helpers import example, results_in, run_cluster, run_script, worker_results


@pytest.mark.tf2
def test_baseline_reaches_accuracy_and_prints_its_result():
    code, text = run_script([sys.executable, example("Non-Distributed_Setup.py")])
    assert code == 0, text
    [result] = results_in(text)
    assert result["algorithm"] == "non_distributed"
    assert result["global_step"] == result["local_steps"] == 1000
    assert result["test_accuracy"] >= 0.95
    assert "[local] step 500 " in text


@pytest.mark.tf2
def test_one_distributed_worker_computes_what_the_baseline_computes():
    """Same seeded θ, same data order, same update: only the place where θ lives differs."""
    code, text = run_script([sys.executable, example("Non-Distributed_Setup.py"),
                             "--train_steps", "300"])
    assert code == 0, text
    [baseline] = results_in(text)
    [distributed] = worker_results(run_cluster("Distributed-Setup/dist_setup.py", workers=1,
                                               args=["--train_steps", "300"]))
    assert distributed["global_step"] == baseline["global_step"] == 300
    assert abs(distributed["train_loss"] - baseline["train_loss"]) < 1e-3
    assert abs(distributed["test_accuracy"] - baseline["test_accuracy"]) < 1e-3
