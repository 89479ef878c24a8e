"""What a task says when something is off: a loss that is no longer a number, a run too short
for a progress line, an identity taken by default, a wait for a peer, a ps restarted after the
run ended. Each message names the task at fault and what to do; no path ends in exit code 0
where training went wrong."""
import re

import pytest

from helpers import (LocalCluster, example, free_ports, load_example, output, run_cluster,
                     worker_results)

HOGWILD = "Hogwild/Hogwild.py"


def test_a_loss_that_is_not_finite_stops_the_worker_in_one_line_and_nothing_exits_0():
    # (a --timeout of 15 s: under load a worker may take 5 s to start)
    cluster = LocalCluster(example(HOGWILD), workers=1, echo=False, args=[
        "--learning_rate", "1e30", "--train_steps", "500", "--timeout", "15"])
    try:
        cluster.start()
        assert cluster.wait(60, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    codes = cluster.returncodes()
    assert codes["worker0"] == 1 and codes["ps0"] != 0, (codes, output(cluster))
    errors = [line for line in cluster.task("worker0").lines if "error:" in line]
    assert len(errors) == 1 and "the loss is" in errors[0] and "--learning_rate" in errors[0], (
        output(cluster))


@pytest.mark.tf2
def test_a_run_shorter_than_log_every_still_prints_a_progress_line():
    cluster = run_cluster(HOGWILD, args=["--train_steps", "10", "--log_every", "250"])
    trained = [result for result in worker_results(cluster) if result["local_steps"]]
    assert trained, output(cluster)  # (a worker that comes late finds the run complete)
    for result in trained:
        worker = "worker%d" % result["task_index"]
        assert any(" loss " in line and "test accuracy" in line
                   for line in cluster.task(worker).lines), output(cluster, worker)
        assert len(result["curve"]) == 1


@pytest.mark.parametrize("given, said", [
    (["--job_name", "worker"], "[worker0] no --task_index given: this task is worker 0"),
    (["--task_index", "1"], "[worker1] no --job_name given: this task is worker 1")])
def test_a_task_whose_identity_is_taken_by_default_says_so_first(given, said, capsys):
    ps, first, second = free_ports(3)
    load_example(HOGWILD).parse_flags(given + [
        "--ps_hosts", "localhost:%d" % ps,
        "--worker_hosts", "localhost:%d,localhost:%d" % (first, second)])
    assert capsys.readouterr().out.splitlines()[0] == said


def test_a_worker_waiting_for_its_ps_says_whom_it_waits_for_within_seconds():
    cluster = LocalCluster(example(HOGWILD), workers=1, echo=False, args=["--timeout", "30"])
    try:
        cluster.start(["worker0"])
        assert cluster.wait_for_line("worker0", r"waiting for ps0 \(localhost:\d+\) to come up",
                                     20), output(cluster)
    finally:
        cluster.stop()


def test_a_worker_waiting_for_the_chief_names_it():
    cluster = LocalCluster(example(HOGWILD), workers=2, echo=False, args=["--timeout", "30"])
    try:
        cluster.start(["ps0", "worker1"])
        assert cluster.wait_for_line(
            "worker1", r"waiting for the chief, worker0 \(localhost:\d+\), to make θ ready", 25), (
            output(cluster))
    finally:
        cluster.stop()


def test_a_ps_restarted_after_the_run_ended_finds_it_complete_and_exits_0(tmp_path):
    log_dir = str(tmp_path / "logs")
    cluster = LocalCluster(example(HOGWILD), workers=2, echo=False, args=[
        "--train_steps", "60", "--log_dir", log_dir, "--timeout", "4"])
    try:
        cluster.start()
        assert cluster.wait(60), output(cluster)
        cluster.restart(cluster.task("ps0"))  # its workers are gone, their run is complete
        assert cluster.wait(30, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert cluster.returncodes()["ps0"] == 0, output(cluster, "ps0")
    assert "the run is already complete" in output(cluster, "ps0")


def test_a_log_dir_too_small_for_its_checkpoints_is_refused_before_any_server(small_disk):
    (small_disk / "filler").write_bytes(b"x" * (14 * 2 ** 20))
    cluster = LocalCluster(example(HOGWILD), workers=1, echo=False,
                           args=["--log_dir", str(small_disk / "run")])
    try:
        cluster.start()
        assert cluster.wait(60, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert cluster.returncodes()["worker0"] == 2, output(cluster)
    errors = [line for line in cluster.task("worker0").lines if "error:" in line]
    assert len(errors) == 1 and "KiB free, and its checkpoints need about" in errors[0], (
        output(cluster))


def test_a_disk_that_fills_during_the_run_ends_the_chief_in_one_line(small_disk):
    """The chief's next checkpoint fails: one line naming --log_dir, exit 1, no traceback."""
    log_dir = small_disk / "run"
    cluster = LocalCluster(example(HOGWILD), workers=1, echo=False, args=[
        "--log_dir", str(log_dir), "--train_steps", "100000", "--checkpoint_every", "200",
        "--step_delay", "0.002", "--timeout", "5"])
    try:
        cluster.start()
        assert cluster.wait_for_line("worker0", r"step 250 ", 60), output(cluster)
        with open(str(small_disk / "filler"), "wb") as filler:  # the disk fills up
            try:
                while True:
                    filler.write(b"x" * 65536)
            except OSError:
                pass
        assert cluster.wait(60, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert cluster.returncodes()["worker0"] == 1, output(cluster)
    worker = output(cluster, "worker0")
    assert "Traceback" not in worker, worker
    errors = [line for line in cluster.task("worker0").lines if "error:" in line]
    assert len(errors) == 1 and "--log_dir %s cannot take a checkpoint" % log_dir in errors[0], (
        worker)


@pytest.mark.parametrize("script", [HOGWILD, "Synchronous-SGD/ssgd.py"])
def test_a_chief_that_never_comes_up_is_named_by_the_worker_that_waits_for_it(script):
    """ps0 and worker1 started, worker0 never: the ps names worker0, and so does worker1 (it
    once blamed the ps, which had already given up on the chief and exited)."""
    cluster = LocalCluster(example(script), workers=2, echo=False, args=["--timeout", "6"])
    try:
        cluster.start(["ps0", "worker1"])
        assert cluster.wait(60, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    chief = re.escape(cluster.worker_hosts[0])
    assert cluster.task("ps0").returncode == 1, output(cluster)
    assert re.search(r"\[ps0\] error: worker0 \(%s\) never came up" % chief,
                     output(cluster, "ps0")), output(cluster)
    assert cluster.task("worker1").returncode == 138, output(cluster)
    errors = [line for line in cluster.task("worker1").lines if "] error: " in line]
    assert len(errors) == 1 and re.search(r"the chief, worker0 \(%s\), never came up" % chief,
                                          errors[0]), output(cluster)


@pytest.mark.parametrize("script", ["AllReduce-SGD/AllReduce-SGD.py", "Gossip-SGD/Gossip-SGD.py"])
def test_a_worker_without_a_ps_says_which_peer_it_waits_for_and_that_it_never_came_up(script):
    """worker1 never started: worker0 says within seconds that it waits for worker1 (it said
    nothing for the whole --timeout), then ends with 138 saying worker1 never came up."""
    cluster = LocalCluster(example(script), workers=2, echo=False, args=["--timeout", "8"])
    try:
        cluster.start(["worker0"])
        assert cluster.wait(60, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    peer = re.escape(cluster.worker_hosts[1])
    lines = cluster.task("worker0").lines
    assert cluster.task("worker0").returncode == 138, output(cluster)
    waiting = [i for i, line in enumerate(lines)
               if re.search(r"\] waiting for worker1 \(%s\) to come up" % peer, line)]
    errors = [i for i, line in enumerate(lines) if "] error: " in line]
    assert len(waiting) == 1 and len(errors) == 1 and waiting[0] < errors[0], output(cluster)
    assert re.search(r"worker1 \(%s\) never came up" % peer, lines[errors[0]]), output(cluster)
