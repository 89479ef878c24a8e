# -- The synchronous family: N, a worker's synchronous step, the chief's aggregation --------------
def add_replicas_flag(parser):
    parser.add_argument_group("synchronous steps").add_argument(
        "--replicas_to_aggregate", type=int, metavar="N",
        help="how many workers' contributions the ps averages into each update (default: all "
             "M workers); with N < M, backup workers: the first N fresh contributions of a step "
             "are averaged, whoever sent them, and older ones are dropped")


def check_replicas_flag(parser, args):
    workers = len(args.cluster["worker"])
    if args.replicas_to_aggregate is None:
        args.replicas_to_aggregate = workers
    if not 1 <= args.replicas_to_aggregate <= workers:
        parser.error("--replicas_to_aggregate must be between 1 and the number of workers (%d), "
                     "got %d" % (workers, args.replicas_to_aggregate))


def synchronous_step(optimizer, grads_and_vars, global_step):
    """SyncReplicasOptimizer.apply_gradients, the gradients sent in one message: returns the
    global step of the token this worker's step takes."""
    gradients, variables = zip(*grads_and_vars)
    grads_and_vars = list(zip(sent_to_the_ps(gradients, variables), variables))
    return optimizer.apply_gradients(grads_and_vars, global_step=global_step)


class SynchronousTrainingHook(tf.train.SessionRunHook):
    """The synchronous steps' start-up on every worker, the chief's aggregations until the last
    update, and every worker's watch over its peers (docs/appendix.md: how training ends, and
    what a lost worker or chief does)."""

    def __init__(self, args, server, graph, watchdog):
        self.args, self.server, self.watchdog = args, server, watchdog
        self.who = task_name("worker", args.task_index)
        self.is_chief = is_chief(args)
        optimizer, self.global_step = graph["optimizer"], graph["global_step"]
        self.init_op = optimizer.chief_init_op if self.is_chief else optimizer.local_step_init_op
        optimizer.ready_for_local_init_op.mark_used()  # (MonitoredTrainingSession checks it)
        # One aggregation (the mean of N per accumulator, the update, M tokens), then the step.
        with tf.control_dependencies(optimizer.get_chief_queue_runner().enqueue_ops):
            self.aggregate = self.global_step.read_value()
        self.release = optimizer.get_init_tokens_op(len(args.cluster["worker"]) - 1)
        self.rejoined, self.stopped = False, threading.Event()
        self.session, self.threads = None, []

    def after_create_session(self, session, coord):
        session.run(self.init_op)
        self.session = session  # the watch follows the newest session; the chief aggregates
        loops = ([] if self.threads else [(self.watch_peers, ())]) + (
            [(self.aggregate_until_the_last_step, (session,))] if self.is_chief else [])
        for loop, loop_args in loops:
            self.threads.append(threading.Thread(target=loop, args=loop_args, daemon=True))
            self.threads[-1].start()

    def chief_joined(self):
        self.rejoined = True  # a restarted chief releases the others with its first step

    def before_run(self, run_context):
        return tf.train.SessionRunArgs([self.release, self.global_step]) if self.rejoined \
            else None

    def after_run(self, run_context, run_values):
        if self.rejoined:
            self.rejoined = False
            print("[%s] one token for each other worker, for global step %d, put in the "
                  "queue: a worker that waited for the update the chief's old self was making "
                  "goes on" % (self.who, run_values.results[1]), flush=True)

    def stop(self):
        self.stopped.set()  # the training loop ended: from now on nothing is fatal

    def end(self, session):
        self.stop()
        for thread in self.threads:
            thread.join(self.args.timeout)

    def aggregate_until_the_last_step(self, session):
        try:
            global_step = session.run(self.global_step)
            while global_step < self.args.train_steps:
                global_step = session.run(self.aggregate)
        except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError):
            return  # the ps was lost: the re-created session starts a new aggregation
        except tf.errors.OpError as error:
            self.fail("the aggregation stopped: %s (%s)" % (why_stuck(
                self.args, self.watchdog.reached, self.server), error_line(error)))

    def watch_peers(self):
        """A lost chief, or more lost workers than backups, blocks every update: wait half of
        --timeout for the lost ones to be started again, else leave with the retryable code."""
        cluster, workers = self.args.cluster, len(self.args.cluster["worker"])
        backups = workers - self.args.replicas_to_aggregate
        seen, strikes, noticed, missed_since = {0}, {}, set(), None
        interval = 0.0  # the first look at once, then every 0.5 s
        while not self.stopped.wait(interval):
            interval = 0.5
            down = set(unreachable(cluster, "worker"))
            seen |= set(range(workers)) - down  # (a worker counts once it has been up)
            strikes = {index: strikes.get(index, 0) + 1 for index in down & seen}
            gone_workers = sorted(index for index, count in strikes.items() if count >= 3)
            if missed_since is not None and not (0 in gone_workers or len(gone_workers) > backups):
                print("[%s] back: the synchronous steps go on" % self.who, flush=True)
                missed_since, noticed = None, set(gone_workers)
            if not gone_workers or (set(gone_workers) <= noticed and missed_since is None):
                continue
            if missed_since is not None:  # no update can complete meanwhile: nothing to read
                if time.monotonic() - missed_since > self.args.timeout / 2:
                    return self.fail(message, tell_the_ps=True)  # (even if the ps is gone too)
                continue
            try:
                global_step = self.session.run(self.global_step)
            except (tf.errors.OpError, RuntimeError):  # the ps went away too (or the session
                continue  # is being re-created): the Watchdog says so
            if global_step >= self.args.train_steps:
                return  # they left after the last update, as they should
            lost = describe(cluster, "worker", gone_workers)
            if 0 in gone_workers:
                why = ("it was the chief, which aggregates the gradients, so no update can "
                       "complete")
            elif len(gone_workers) > backups:
                why = ("every update needs %d workers (--replicas_to_aggregate); workers left: "
                       "%d of %d" % (self.args.replicas_to_aggregate,
                                     workers - len(gone_workers), workers))
            else:
                print("[%s] %s is gone (global step %d); going on with the %d workers left, as "
                      "every update needs %d (--replicas_to_aggregate)"
                      % (self.who, lost, global_step, workers - len(gone_workers),
                         self.args.replicas_to_aggregate), flush=True)
                noticed = set(gone_workers)
                continue
            # This hook's deadline starts now, and the Watchdog's after it; the message names
            # the peers that started the wait, not those that give up meanwhile.
            missed_since = time.monotonic()
            self.watchdog.progress()
            message = "%s is gone before the end of training (global step %d of %d): %s" % (
                lost, global_step, self.args.train_steps, why)
            print("[%s] %s; waiting up to %g s (half of --timeout) for it to be started again"
                  % (self.who, message, self.args.timeout / 2), flush=True)

    def fail(self, message, tell_the_ps=False):
        """End this worker now: its training loop is blocked in a step that cannot complete."""
        if self.stopped.is_set():
            return
        print("[%s] error: %s" % (self.who, message), file=sys.stderr, flush=True)
        sys.stdout.flush()
        if tell_the_ps and not unreachable(self.args.cluster, "ps"):
            try:
                tell_parameter_servers(self.args, self.server, b"done")
            except tf.errors.OpError:
                pass
        os._exit(RETRYABLE_EXIT_CODE)
