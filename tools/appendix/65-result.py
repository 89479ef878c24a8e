# -- The RESULT line ------------------------------------------------------------------------------
def report(args, who, local_steps, first_global_step, global_step, losses, test_accuracy,
           curve, started, **algorithm_fields):
    """The RESULT line: one JSON object that the launcher, the tests and the benchmark read."""
    seconds = time.time() - started
    result = {"algorithm": ALGORITHM, "job": args.job_name, "task_index": args.task_index,
              "workers": len(args.cluster["worker"]), "global_step": int(global_step),
              "first_global_step": int(first_global_step), "local_steps": local_steps,
              "train_loss": round(float(np.mean(losses)), 4) if losses else None,
              "test_accuracy": round(float(test_accuracy), 4),
              "wall_seconds": round(seconds, 3),
              "steps_per_second": round(local_steps / seconds, 1) if seconds > 0 else None,
              "cpu_seconds": round(time.process_time(), 2), "curve": curve}
    result.update(algorithm_fields)
    print("[%s] RESULT %s" % (who, json.dumps(result)), flush=True)
