# only where PARAMETER_SERVERS = 0
# -- Sessions, and the end of a run without a ps --------------------------------------------------
@contextlib.contextmanager
def training_session(args, server, graph, watchdog, hooks=(), scaffold=None, config=None):
    """A SingularMonitoredSession per worker; yields (sess, loop)."""
    hooks, scaffold = list(hooks), scaffold or tf.train.Scaffold()
    if is_chief(args) and args.log_dir:
        hooks.append(SaveAtTheEndHook(args.log_dir, scaffold=scaffold,
                                      save_steps=args.checkpoint_every))
    session = tf.train.SingularMonitoredSession(
        hooks=hooks, scaffold=scaffold, master=server.target,
        config=config or session_config(args),
        checkpoint_filename_with_path=is_chief(args) and newest_intact_checkpoint(args) or None)
    with session as sess:
        loop = TrainingLoop(args, sess, graph, watchdog)
        try:
            yield sess, loop
        finally:
            for hook in hooks:
                getattr(hook, "stop", lambda: None)()
        loop.finish()


def finish_among_workers(args, server, watchdog):
    """Without a ps nobody exits before all are done: worker 0 gathers and
    releases them, then waits until their ports close."""
    workers = len(args.cluster["worker"])
    with tf.Graph().as_default():
        with tf.device("/job:worker/task:0"):
            done = tf.FIFOQueue(workers, tf.int32, [[]], shared_name="done_queue",
                                name="done_queue")
            released = tf.FIFOQueue(1, tf.int32, shared_name="released_queue",
                                    name="released_queue")
        with tf.Session(server.target, config=session_config(args)) as sess:
            sess.run(done.enqueue(args.task_index))
            if not is_chief(args):
                try:
                    sess.run(released.dequeue())
                except tf.errors.OutOfRangeError:
                    return  # closed: every worker is done
            sess.run(done.dequeue_many(workers))
            sess.run(released.close())
    deadline = time.monotonic() + args.timeout
    while len(unreachable(args.cluster, "worker")) < workers - 1 and (
            time.monotonic() < deadline):
        watchdog.progress()
        time.sleep(0.1)
    print("[worker0] all %d workers are done; exiting" % workers, flush=True)
