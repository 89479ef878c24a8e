"""TensorBoard: with --log_dir, every worker writes its own curves (a run per worker, in
log_dir/worker<i>), at every --log_every local steps and at the final global step."""
import glob
import os

import pytest

from helpers import load_example, run_cluster, UNHURRIED_CHIEF, worker_results

TF = None


def scalars(folder):
    """{tag: [(step, value), ...]} of the event files in one folder."""
    global TF
    TF = TF or load_example("Hogwild/Hogwild.py").tf
    found = {}
    for path in sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*"))):
        for event in TF.train.summary_iterator(path):
            for value in event.summary.value:
                found.setdefault(value.tag, []).append((event.step, value.simple_value))
    return found


# One asynchronous example (the global step counts every worker's steps), one synchronous
# example with a window (a global step is a round of T local steps of every worker).
@pytest.mark.tf2
@pytest.mark.parametrize("script, args", [
    ("Hogwild/Hogwild.py", ["--train_steps", "1000", "--log_every", "100"]),
    ("SAGN/SAGN.py", ["--train_steps", "60", "--log_every", "40"])])
def test_every_worker_writes_its_loss_and_accuracy_to_the_final_step(script, args, tmp_path):
    log_dir = str(tmp_path / "logs")
    # Every worker trains: the chief starts once the others wait for it, and is unhurried.
    cluster = run_cluster(script, workers=2, args=args + ["--log_dir", log_dir], chief_last=True,
                          task_args={"worker0": UNHURRIED_CHIEF})
    log_every = int(args[args.index("--log_every") + 1])
    for result in worker_results(cluster):
        curves = scalars(os.path.join(log_dir, "worker%d" % result["task_index"]))
        assert sorted(curves) == ["loss", "test_accuracy"], (curves, result)
        for tag, points in curves.items():
            steps = [step for step, _ in points]
            # A point every --log_every local steps, and one at the end: the final global step.
            assert len(points) == result["local_steps"] // log_every + 1, (tag, points, result)
            assert steps == sorted(steps) and steps[-1] == result["global_step"], (tag, points)
        assert curves["test_accuracy"][-1][1] == pytest.approx(result["test_accuracy"], abs=1e-4)
        # The loss is the mean over the last --log_every minibatches, as on the console, and
        # the last point is the RESULT's train_loss.
        assert curves["loss"][-1][1] == pytest.approx(result["train_loss"], abs=1e-4)
        assert all(0 < loss < 3 for _, loss in curves["loss"])
    # At the top of --log_dir the chief's checkpoints and its graph (TensorBoard's Graphs tab),
    # but no curves: each worker's are in its own run.
    assert scalars(log_dir) == {}
