"""Non-Distributed_Setup.py: the one-process reference."""
import sys

from helpers import example, results_in, run_script


def test_baseline_reaches_accuracy_and_prints_its_result():
    code, text = run_script([sys.executable, example("Non-Distributed_Setup.py")])
    assert code == 0, text
    [result] = results_in(text)
    assert result["algorithm"] == "non_distributed"
    assert result["global_step"] == result["local_steps"] == 1000
    assert result["test_accuracy"] >= 0.95
    assert "[local] step 500 " in text
