import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_terminal_summary(terminalreporter):
    """The reliability suite's table: scenario × example → outcome."""
    from test_reliability import OUTCOMES
    if not OUTCOMES:
        return
    scenarios = sorted({scenario for scenario, _ in OUTCOMES})
    examples = sorted({example for _, example in OUTCOMES})
    width = max(len(example) for example in examples)
    write = terminalreporter.write_line
    write("")
    write("fault matrix (survived: training finished without the dead task; failed cleanly: "
          "every task ended, naming it)")
    write("  ".join(["example".ljust(width)] + [s.ljust(18) for s in scenarios]))
    for example in examples:
        write("  ".join([example.ljust(width)] + [
            OUTCOMES.get((scenario, example), "-").ljust(18) for scenario in scenarios]))
