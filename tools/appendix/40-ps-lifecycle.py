# only where there is a ps
# -- The parameter server's lifecycle -------------------------------------------------------------
def ready_queue():
    """Closed by the chief once θ is ready: waiting workers wake up without polling."""
    with tf.device("/job:ps/task:0"):
        return tf.FIFOQueue(1, tf.int32, shared_name="ready_queue", name="ready_queue")


def run_parameter_server(args, server):
    """Serve θ until every worker is done and gone; name a worker lost for
    --timeout s (closed port or no heartbeat) or never started, and exit 1."""
    me = task_name("ps", args.task_index)
    everyone = set(range(len(args.cluster["worker"])))
    with tf.Graph().as_default():
        queue = status_queues(args.cluster)[args.task_index]
        waiting, dequeue = queue.size(), queue.dequeue()
        with tf.Session(server.target, config=session_config(args)) as sess:
            started, done, closed_since, heard, silent = set(), set(), {}, {}, set()
            while True:
                time.sleep(0.2)  # between looks at the ports and the queue
                # The ports first, then the queue: a worker whose port was already closed has
                # said all it ever will. Only this ps dequeues, so taking what size() counted
                # never waits. (Do not poll with a dequeue that times out: in TF 1.x one that
                # times out just as an item arrives can take the item, and it is lost.)
                down = set(unreachable(args.cluster, "worker"))
                for _ in range(sess.run(waiting)):
                    index, status = sess.run(dequeue)
                    heard[int(index)] = time.monotonic()
                    (done if status == b"done" else started).add(int(index))
                    all_done_at = time.time()
                if done == everyone:
                    if down == everyone or time.time() - all_done_at > args.timeout:
                        break
                    continue
                closed_since = {index: closed_since.get(index, time.monotonic())
                                for index in (down & started) - done}
                frozen = {index for index in started - done - down
                          if time.monotonic() - heard[index] > args.timeout}
                for index in sorted(frozen - silent):
                    print("[%s] %s stopped answering: no heartbeat for %g s (--timeout), yet "
                          "its port is open (frozen or cut off)"
                          % (me, describe(args.cluster, "worker", [index]), args.timeout),
                          file=sys.stderr, flush=True)
                silent = frozen
                lost = sorted(frozen | {index for index, since in closed_since.items()
                                        if time.monotonic() - since > args.timeout})
                never_up = sorted(everyone - started - done)
                if lost and len(done) + len(lost) == len(everyone):
                    # The first to go silent is named first: the others may have given up
                    # waiting for it (a synchronous chief cannot finish without it).
                    went = {**closed_since, **{index: heard[index] for index in frozen}}
                    first, *after = sorted(lost, key=went.get)
                    how = {index: "frozen or cut off" if index in frozen else "its port closed"
                           for index in lost}
                    then = ", ".join("%s (%s)" % (describe(args.cluster, "worker", [index]),
                                                  how[index]) for index in after)
                    print("[%s] error: %s stopped without finishing%s; %d of %d workers "
                          "finished" % (me, describe(args.cluster, "worker", [first]),
                                        " first (%s), then %s" % (how[first], then) if after
                                        else "", len(done), len(everyone)), file=sys.stderr)
                    return 1
                if never_up and time.time() - STARTED > args.timeout and (
                        run_already_complete(args)):
                    print("[%s] the run is already complete (--log_dir %s reached --train_steps "
                          "%d): exiting" % (me, args.log_dir, args.train_steps), flush=True)
                    return 0
                if never_up and time.time() - STARTED > args.timeout:
                    print("[%s] error: %s never came up within %g s (--timeout)"
                          % (me, describe(args.cluster, "worker", never_up), args.timeout),
                          file=sys.stderr)
                    return 1
    print("[%s] all %d worker%s done; exiting (%.2f s of CPU time)"
          % (me, len(everyone), " is" if len(everyone) == 1 else "s are", time.process_time()),
          flush=True)
    return 0


def tell_parameter_servers(args, server, status):
    """Enqueue (this worker, status) on every ps, retried until the ps is up."""
    if not args.cluster["ps"]:
        return
    with tf.Graph().as_default():
        enqueues = [queue.enqueue((args.task_index, status))
                    for queue in status_queues(args.cluster)]
        said, since = False, time.monotonic()
        while True:
            while unreachable(args.cluster, "ps"):
                if not said and time.monotonic() - since > 5.0:
                    print("[%s] waiting for %s to come up" % (
                        task_name("worker", args.task_index),
                        describe(args.cluster, "ps", unreachable(args.cluster, "ps"))),
                        flush=True)
                    said = True
                time.sleep(0.05)
            try:
                with tf.Session(server.target, config=session_config(args)) as sess:
                    return sess.run(enqueues)
            except tf.errors.UnavailableError:
                time.sleep(0.1)


def wait_until_chief_is_ready(args, server):
    """A non-chief worker blocks on the ready queue until the chief closes it."""
    waiting = threading.Timer(5.0, lambda: print("[%s] waiting for the chief, %s, to make θ "
                                                 "ready" % (task_name("worker", args.task_index),
                                                            describe(args.cluster, "worker",
                                                                     [0])), flush=True))
    with tf.Graph().as_default():
        dequeue = ready_queue().dequeue()
        with tf.Session(server.target, config=session_config(args)) as sess:
            waiting.start()
            args.waiting_for_the_chief = True  # (why_stuck names the chief meanwhile)
            try:
                sess.run(dequeue)
            except tf.errors.OutOfRangeError:
                pass
            finally:
                waiting.cancel()
            args.waiting_for_the_chief = False  # (still true for the message of a timeout)


def run_already_complete(args):
    """Whether --log_dir's newest checkpoint has reached --train_steps."""
    path = args.log_dir and tf.train.latest_checkpoint(args.log_dir)
    try:
        return bool(path) and tf.train.load_checkpoint(path).get_tensor(
            "global_step") >= args.train_steps
    except (tf.errors.OpError, ValueError):
        return False


def theta_on_the_ps(args, server, uninitialized=None):
    """Whether the ps already holds an initialized θ, saying so if it does."""
    if uninitialized is None:
        uninitialized = tf.report_uninitialized_variables(tf.global_variables())
    with tf.Session(server.target, config=session_config(args)) as probe:
        if len(probe.run(uninitialized)):
            return False
        print("[worker0] θ is live on the ps at global step %d: joining it (nothing is "
              "initialized or restored)" % probe.run(tf.train.get_global_step()), flush=True)
    return True
