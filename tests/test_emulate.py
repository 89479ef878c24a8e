"""tools/emulate, the emulated cluster, and `python -m tools.compare --emulate`.

Real namespaces, links and TensorFlow tasks: the namespaces and links are made and always
deleted (after an exception, and after Ctrl-C of the tool); a shaped link delivers its rate
within 15 %; one short emulated comparison with 4 workers writes raw.json's record of each run,
with the emulated and the measured link rate and compute time, and they agree within 15 %;
θ carries the scaled bytes. The paper claims' verdicts (agrees, contradicts, within noise) are
tested on a raw.json made here with chosen numbers, redrawn by --replot. Needs root and
iproute2 (ip netns, tc); elsewhere the tests that need them are skipped, saying why.
"""
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from helpers import ROOT, run_script

import compare  # tools/compare/ (helpers put tools/ on the path)
from emulate import SCENARIOS, can_make_namespaces, emulation
from emulate.network import (NAME_PREFIX, Network, measure_both_ways, measure_link,
                             sweep_stale_namespaces)

pytestmark = [pytest.mark.filterwarnings("ignore:'.*' deprecated - use '.*'"),
              pytest.mark.xdist_group("emulate")]
needs_namespaces = pytest.mark.skipif(
    bool(can_make_namespaces()), reason="cannot make network namespaces here: %s"
    % can_make_namespaces())

TOLERANCE = 0.15
WORKERS = 4


def namespaces():
    return subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE,
                          check=True).stdout.decode()


def ours(name_part):
    return [line.split()[0] for line in namespaces().splitlines() if name_part in line]


def command_line(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as text:
            return text.read()
    except OSError:  # (gone)
        return b""


@needs_namespaces
def test_the_namespaces_and_links_are_made_and_always_deleted():
    with pytest.raises(RuntimeError, match="on purpose"):
        with Network({"ps0": 1e8, "worker0": 1e8, "worker1": None}) as net:
            made = ours(net.switch.rsplit("-", 1)[0])
            assert sorted(made) == sorted([net.switch] + list(net.namespaces.values()))
            # each host's link is shaped at both ends (None: not shaped)
            for host, shaped in (("ps0", True), ("worker1", False)):
                for namespace, device in net.ends(host):
                    qdiscs = subprocess.run(["ip", "netns", "exec", namespace, "tc", "qdisc",
                                             "show", "dev", device], stdout=subprocess.PIPE,
                                            check=True).stdout.decode()
                    assert ("htb" in qdiscs) == shaped, (host, device, qdiscs)
            raise RuntimeError("on purpose")
    assert not ours(net.switch.rsplit("-", 1)[0])


@needs_namespaces
def test_namespaces_left_by_a_killed_emulator_are_swept():
    """A process killed with SIGKILL cannot delete its namespaces: the next one does, and
    leaves those of a live process alone."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = "%s%d-0000-sw" % (NAME_PREFIX, gone.pid)
    live = "%s%d-0000-sw" % (NAME_PREFIX, os.getpid())
    for name in (stale, live):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert stale in sweep_stale_namespaces()
        assert stale not in namespaces() and live in namespaces()
    finally:
        for name in (stale, live):
            subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)


@needs_namespaces
@pytest.mark.parametrize("rate", [20e6, 200e6])
def test_a_shaped_link_delivers_its_rate(rate):
    """Bulk TCP transfers through two links shaped at `rate`, each way: none exceeds it by more
    than 15 %, and one of at most 10 reaches it within 15 % (under the suite's load a sender or
    receiver that waits for a CPU measures less, or nothing: the best of 3 once measured 81 % of
    200 Mb/s in CI); between unshaped links of the same network a transfer is much faster (the
    shaping is what limits it). 200 Mb/s at most: under the suite's load a Python sender on 2
    cores cannot fill 1 Gb/s (it measured 30 % of it)."""
    with Network({"ps0": rate, "worker0": rate, "worker1": None, "worker2": None}) as net:
        for way, achieved in measure_both_ways(net, "worker0", "ps0", tries=10,
                                               enough=rate * (1 - TOLERANCE)).items():
            assert achieved and abs(achieved / rate - 1) <= TOLERANCE, (way, achieved)
        if rate < 1e8:
            assert (measure_link(net, "worker1", "worker2") or 0) > 5 * rate


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    """One short emulated comparison: the baseline and Hogwild with 4 workers, datacenter, at
    F = 20 (500 Mb/s links): under the suite's load a sender on 2 cores fills about 700 Mb/s,
    so F = 10's 1 Gb/s links measured 72-76 % in fresh-clone CI runs."""
    reason = can_make_namespaces()
    if reason:
        pytest.skip("cannot make network namespaces here: %s" % reason)
    output = str(tmp_path_factory.mktemp("emulated"))
    printed = io.StringIO()
    handler = signal.getsignal(signal.SIGTERM)  # (the tool ends its clusters on SIGTERM)
    try:
        with contextlib.redirect_stdout(printed):  # in-process: the tasks fork from the zygote
            code = compare.main(["--emulate", "datacenter", "--scale", "20", "--only", "Hogwild",
                                 "--workers", str(WORKERS), "--repeats", "1", "--budget", "100",
                                 "--target", "0.8", "--output", output])
    finally:
        signal.signal(signal.SIGTERM, handler)
    text = printed.getvalue()
    assert code == 0, text
    with open(os.path.join(output, "raw.json")) as source:
        return output, text, json.load(source)


def test_an_emulated_comparison_records_each_run_configured_and_measured(comparison):
    output, text, raw = comparison
    assert set(os.listdir(output)) >= {"raw.json", "comparison.md", "comparison.csv",
                                       "scaling.png", "accuracy_vs_time.png"}
    assert raw["settings"]["emulate"]["scenarios"] == ["datacenter"]
    records = {record["algorithm"]: record for record in raw["runs"]}
    assert set(records) == {"Non-Distributed_Setup", "Hogwild"}
    for record in raw["runs"]:
        assert record["ok"], record.get("error")
        for field in ("algorithm", "workers", "scenario", "time_to_target_s", "test_accuracy",
                      "link_bits_per_second", "link_measured_bits_per_second",
                      "compute_seconds", "compute_measured_seconds"):
            assert field in record, field
        assert record["scenario"] == "datacenter"
        assert record["time_to_target_s"] is None or record["time_to_target_s"] > 0
    hogwild = records["Hogwild"]
    assert hogwild["workers"] == WORKERS and len(hogwild["results"]) == WORKERS
    assert hogwild["test_accuracy"] in {r["test_accuracy"] for r in hogwild["results"]}
    assert hogwild["test_accuracy"] > 0.8
    # time zero is the start of training, after every task's start-up
    assert hogwild["processes_launched"] < hogwild["launched"] < hogwild["ended"]
    assert "emulated datacenter" in text and "time to 0.80" in text


def test_the_emulated_link_and_compute_are_what_was_configured(comparison):
    """The scenario's real setting, scaled by F: the links' rate (F), each worker's compute
    time (F), θ's bytes (F²); and measured, each within 15 %: the rate a bulk transfer
    achieves, each worker's compute time per step, the bytes the ps's link carries per worker
    step (θ pulled, g pushed: twice the model's scaled bytes and the example's own θ), each
    worker's compute time per step as it slept it. What the machine adds, the time a worker
    waited for a CPU, is measured beside it, and where it is above 15 % the comparison says so:
    it is this machine's load, not the emulation."""
    output, _, raw = comparison
    hogwild = next(r for r in raw["runs"] if r["algorithm"] == "Hogwild")
    scale = raw["settings"]["emulate"]["scale"]
    real = SCENARIOS["datacenter"]
    emulated = hogwild["emulated"]
    assert emulated["link_bits_per_second"] == real.link / scale
    assert emulated["compute_seconds"] == [real.compute.mean / scale] * WORKERS
    assert emulated["payload_mb"] * 2 ** 20 == pytest.approx(real.model.bytes / scale ** 2)
    assert abs(hogwild["link_measured_bits_per_second"] / hogwild["link_bits_per_second"]
               - 1) <= TOLERANCE, hogwild["measured"]["link_check_bits_per_second"]
    workers = hogwild["measured"]["workers"]
    assert len(workers) == WORKERS
    over = []
    for name, worker in workers.items():
        # the emulated compute time, as the worker slept it: never less than configured, and
        # more by 15 % at most, or by what the machine added (a sleep that ends waits for a
        # CPU too, which counts in the wait: a loaded run slept 10.1 ms of 8.5 ms a step)
        slept, configured = worker["compute_slept_seconds"], worker["compute_seconds"]
        assert configured * 0.999 <= slept <= (
            configured * (1 + TOLERANCE) + worker["cpu_wait_seconds_per_step"]), (name, worker)
        # the configured sleep, plus what this machine added: the time waited for a CPU
        assert worker["compute_measured_seconds"] == pytest.approx(
            worker["compute_seconds"] + worker["cpu_wait_seconds_per_step"]), (name, worker)
        if worker["compute_measured_seconds"] > (1 + TOLERANCE) * worker["compute_seconds"]:
            over.append(name)
        # a step takes at least its compute time and the transfer of θ and g; and its main
        # thread, asleep for the compute time, waited for a CPU only in the rest of the step
        # (the wait, from /proc's schedstat, checked against the example's own wall clock)
        assert worker["step_seconds"] >= (worker["compute_seconds"]
                                          + worker["cpu_wait_seconds_per_step"]), (name, worker)
    own_theta = 4 * (64 * 128 + 128 + 128 * 10 + 10)  # the example's model, float32
    expected = 2 * (emulated["payload_mb"] * 2 ** 20 + own_theta)
    assert abs(hogwild["measured"]["bytes_per_worker_step"] / expected - 1) <= TOLERANCE
    during = hogwild["measured"]["link_during_run_bits_per_second"]
    assert 0 < during["to"]["peak"] <= (1 + TOLERANCE) * emulated["link_bits_per_second"]
    # a busy machine's CPU wait is measured, not hidden: the comparison says so where it was
    # more than the tolerance in any run (under the suite's load it often is; alone it is not)
    over += [name for run in raw["runs"] if run is not hogwild
             for name, worker in run.get("measured", {}).get("workers", {}).items()
             if worker.get("compute_measured_seconds", 0) > (1 + TOLERANCE) * worker[
                 "compute_seconds"]]
    with open(os.path.join(output, "comparison.md")) as report:
        said = "measured compute time per step was more than 15%" in report.read()
    assert said == bool(over), over


@needs_namespaces
def test_ctrl_c_stops_every_task_and_deletes_the_namespaces():
    """Ctrl-C while the workers start up (the emulator waits for them): exit code 130, every
    task's process gone, every namespace deleted."""
    command = [sys.executable, "-m", "tools.emulate", "--scenario", "commodity", "--workers",
               "2", "Hogwild/Hogwild.py", "--train_steps", "100000"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True)
    prefix = "%s%d-" % (NAME_PREFIX, process.pid)

    def tasks():  # (the example's processes: `tc`, run in a namespace to shape its link, is not)
        pids = [int(pid) for name in ours(prefix) for pid in subprocess.run(
            ["ip", "netns", "pids", name], stdout=subprocess.PIPE).stdout.split()]
        return [pid for pid in pids if b"Hogwild.py" in command_line(pid)]
    try:
        deadline = time.monotonic() + 120
        while len(tasks()) < 2 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # (a condition polled: the workers' processes in their namespaces)
        started = tasks()
        process.send_signal(signal.SIGINT)
        text, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert len(started) == 2, (started, text.decode())  # the first wave: both workers
    assert process.returncode == 130, text.decode()
    assert "interrupted" in text.decode()
    assert not ours(prefix)
    assert not [pid for pid in started if os.path.exists("/proc/%d" % pid)]


# ---------------------------------------------------------------------------------------------
# The claims' verdicts, on numbers chosen here (no cluster runs): --plan writes the plan, the
# runs are filled in, --replot writes the report.
# ---------------------------------------------------------------------------------------------
def planned(tmp_path, scenarios, only, workers):
    code = compare.main(["--emulate", scenarios, "--only", only, "--workers", workers,
                         "--repeats", "2", "--target", "0.9", "--plan", "--output",
                         str(tmp_path)])
    assert code == 0
    with open(os.path.join(str(tmp_path), "raw.json")) as source:
        return json.load(source)


def fill(raw, seconds_to_target):
    """Two successful runs per configuration: worker 0 reaches 0.95 after the chosen seconds
    (repeat 0, then repeat 1 at +5 %); the others' numbers are incidental."""
    for config in raw["plan"]:
        for repeat in range(2):
            seconds = seconds_to_target(config) * (1 + 0.05 * repeat)
            start = 1000.0 * (1 + repeat)
            results = [{"job": "worker", "task_index": index, "global_step": 400,
                        "local_steps": 400 // config["workers"], "wall_seconds": 2 * seconds,
                        "test_accuracy": 0.95,
                        "curve": [[start + seconds / 2, 100, 0.8],
                                  [start + seconds, 200, 0.95]] if index == 0 else []}
                       for index in range(config["workers"])]
            raw["runs"].append({"key": config["key"], "repeat": repeat, "launched": start,
                                "ended": start + 2 * seconds, "ok": True, "results": results})
    return raw


def replot(tmp_path, raw):
    with open(os.path.join(str(tmp_path), "raw.json"), "w") as out:
        json.dump(raw, out)
    assert compare.main(["--replot", str(tmp_path)]) == 0
    return open(os.path.join(str(tmp_path), "comparison.md")).read()


def sentence(report, about):
    found = [line for line in report.splitlines() if about in line]
    assert found, about
    return found[0]


@pytest.mark.parametrize("backup_seconds, verdict", [(10, "agrees with"), (30, "contradicts"),
                                                     (19.5, "neither supports nor "
                                                      "contradicts")])
def test_chens_claim_is_judged_on_the_straggler_scenario(tmp_path, backup_seconds, verdict):
    raw = planned(tmp_path, "heterogeneous", "Synchronous-SGD,Hogwild", "4")
    assert any(c["aggregated"] == 3 and c["workers"] == 4 for c in raw["plan"])

    def seconds(config):
        if config["algorithm"] == "Hogwild":
            return 20.0
        if config["aggregated"] and config["aggregated"] < config["workers"]:
            return backup_seconds
        return 25.0
    text = sentence(replot(tmp_path, fill(raw, seconds)), "straggler(s), Synchronous-SGD (N=3")
    assert verdict + " Chen et al. 2016" in text, text


@pytest.mark.parametrize("downpour_slow, verdict", [(12, "agrees with"), (40, "contradicts")])
def test_deans_claim_compares_the_slowdown_of_slow_links(tmp_path, downpour_slow, verdict):
    raw = planned(tmp_path, "datacenter,commodity", "DOWNPOUR,Hogwild", "2")
    times = {("DOWNPOUR", "datacenter"): 10, ("DOWNPOUR", "commodity"): downpour_slow,
             ("Hogwild", "datacenter"): 10, ("Hogwild", "commodity"): 30}
    text = sentence(replot(tmp_path, fill(raw, lambda config: times.get(
        (config["algorithm"], config["scenario"]), 5))), "DOWNPOUR's time to target")
    assert verdict + " Dean et al. 2012" in text, text
    assert "×%.2f" % (downpour_slow / 10) in text and "×3.00" in text


@pytest.mark.parametrize("allreduce_at_4, verdict", [(10, "agrees with"), (30, "contradicts")])
def test_jins_scaling_claim_compares_the_gain_from_more_workers(tmp_path, allreduce_at_4,
                                                                verdict):
    raw = planned(tmp_path, "datacenter", "AllReduce-SGD,AEASGD", "2,4")
    times = {("AllReduce-SGD", 2): 40, ("AllReduce-SGD", 4): allreduce_at_4,
             ("AEASGD", 2): 30, ("AEASGD", 4): 20}
    report = replot(tmp_path, fill(raw, lambda config: times.get(
        (config["algorithm"], config["workers"]), 50)))
    assert verdict + " Jin et al. 2016's finding" in sentence(report, "From 2 to 4 workers")
    # the choice table: each algorithm's fastest configuration, per scenario
    assert re.search(r"\| AEASGD \| 20\.5 s \(20\.0–21\.0 over 2 repeats\), 4 workers \|",
                     report), report


def test_the_plan_of_an_emulated_comparison_needs_no_root(tmp_path):
    """--plan shows what would run (and --emulate's own mistakes are refused) anywhere."""
    raw = planned(tmp_path, "commodity", "AGN", "1,4")
    assert [(c["algorithm"], c["workers"], c["scenario"]) for c in raw["plan"]] == [
        ("Non-Distributed_Setup", 1, "commodity"), ("AGN", 1, "commodity"),
        ("AGN", 4, "commodity")]
    code, text = run_script([sys.executable, "-m", "tools.compare", "--emulate", "moon"],
                            cwd=ROOT)
    assert code == 2 and "unknown scenario(s) moon; known: datacenter" in text
    settings = emulation(os.path.join(ROOT, "Hogwild/Hogwild.py"), "heterogeneous", 8)
    assert settings["stragglers"] == 1 and settings["parameter_servers"] == 1
    assert settings["compute_seconds"][-1] == pytest.approx(3 * 0.017)
