"""tools/benchmark.py --soak: every task's memory over time, then every task stopped."""
import json
import re
import sys

from helpers import example, run_script
from test_launcher import assert_gone, launched_pids


def test_soak_samples_every_tasks_rss_and_stops_them_all(tmp_path):
    code, text = run_script([sys.executable, example("tools/benchmark.py"), "--soak", "15",
                             "--soak_output", str(tmp_path)])
    assert code == 0, text
    assert re.search(r"^      s  global step  ps0 MB  worker0 MB  worker1 MB$", text, re.M), text
    rows = re.findall(r"^ +(\d+\.\d) +(\d+) +(\d+\.\d) +(\d+\.\d) +(\d+\.\d)$", text, re.M)
    # The 15 s count from the first row with a global step (start-up, however long on a busy
    # machine, is sampled but not counted), with a sample at least every 1.5 s.
    training = next(float(row[0]) for row in rows if int(row[1]) > 0)
    during = [row for row in rows if float(row[0]) >= training]
    assert len(during) >= 10 and float(rows[-1][0]) - training >= 15 - 0.1, text  # (rounded)
    assert int(rows[-1][1]) > int(during[0][1]), text  # and training went on
    for name in ("ps0", "worker0", "worker1"):
        assert re.search(r"^ +%s +[+-]\d+\.\d MB +[+-]\d+\.\d+ MB/min +[+-]\d+\.\d KB per 1000 "
                         r"global steps$" % name, text, re.M), text
    assert "[benchmark] soak: every task stopped" in text
    with open(str(tmp_path / "soak-Hogwild.json")) as record:
        saved = json.load(record)
    assert len(saved["samples"]) == len(rows) and saved["growth"][0].startswith("growth after")
    assert all(set(rss) == {"ps0", "worker0", "worker1"} for _, _, rss in saved["samples"])
    assert (tmp_path / "soak-Hogwild.png").stat().st_size > 10000
    pids = launched_pids(text)
    assert len(pids) == 3
    assert_gone(pids)
