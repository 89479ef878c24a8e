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
    """A worker's synchronous step; returns the global step of the token it took. It is
    SyncReplicasOptimizer.apply_gradients, which builds the worker's half of the step (each
    gradient into its variable's accumulator, tagged with this worker's step; then a token,
    which becomes its step) and the chief's half (the mean of N from each accumulator, the
    update, M tokens) that SynchronousTrainingHook runs on its own, in a loop on the ps (see
    aggregations_on_the_ps)."""
    gradients, variables = zip(*grads_and_vars)  # (the gradients reach the ps in one message)
    grads_and_vars = list(zip(sent_to_the_ps(gradients, variables), variables))
    return optimizer.apply_gradients(grads_and_vars, global_step=global_step)


def aggregations_on_the_ps(optimizer, params, global_step, last_step, seconds):
    """The chief's half of synchronous steps (see synchronous_step), one after the other in a
    tf.while_loop on the ps: each takes the mean of N gradients from every accumulator, applies
    it to params with the wrapped optimizer (global_step += 1; η, if a function, is computed
    then) and puts M tokens holding the new global step in the queue, as SyncReplicasOptimizer's
    own op does once per session.run. The loop ends after the update that reaches last_step, or
    the first to end `seconds` after it started; it returns the global step after its last
    update. So the chief's thread and the ps do not exchange a request and a reply for every
    update (it uses SyncReplicasOptimizer's private attributes, TF 1.15's names)."""
    def aggregate(_):
        taken = []
        for accumulator, device in optimizer._accumulator_list:
            with tf.device(device):
                taken.append(accumulator.take_grad(optimizer._replicas_to_aggregate))
        update = optimizer._opt.apply_gradients(zip(taken, params), global_step)
        with tf.control_dependencies([update]):
            after = global_step.read_value()
        tokens = optimizer._sync_token_queue.enqueue_many(
            tf.fill([optimizer._tokens_per_step], after))
        with tf.control_dependencies([tokens]):
            return tf.identity(after)

    with tf.device(global_step.device):
        started = tf.timestamp()
        return tf.while_loop(
            lambda step: tf.logical_and(step < last_step, tf.timestamp() - started < seconds),
            aggregate, [global_step.read_value()], parallel_iterations=1, back_prop=False)


# Ending synchronous training: nobody waits for a token that will never come.
#
# SyncReplicasOptimizer's own hook runs the chief's aggregation as a QueueRunner that never ends
# by itself, and starts with N tokens in the queue. Once the chief leaves, the workers still in
# a step wait for a token forever, and the chief's thread waits in take_grad: the classic hang
# at the end of TF1 synchronous training. Here the end is part of the protocol instead:
#   1. No tokens at the start: a worker's first step needs none. From then on every update puts
#      exactly one token per worker (M) in the queue, holding the new global step.
#   2. A worker leaves its loop as soon as its token holds a global step >= --train_steps.
#   3. The chief's aggregation loop ends by itself right after the update that reaches
#      --train_steps, so it never waits for gradients that no one will send.
# Why nobody is left waiting: the queue is first in, first out, and the last update puts M
# tokens holding --train_steps behind whatever tokens are left. Each worker still running takes
# tokens until it gets one of those (an older token costs it one more step, whose gradient is
# stale and dropped), and there is one for each; no thread is left blocked on the ps. With
# N = M each worker makes one synchronous step per update, --train_steps in all; with backup
# workers they make at least N x --train_steps together (a fast worker may take the token of a
# late one and step again).
#
# A worker that dies mid-run is another matter: with N = M, or when it was the chief (whose
# thread aggregates), no update can complete without it. So every worker watches the ports of
# its peers. When a peer is gone before the last update and fewer than N workers, or no chief,
# are left, the worker says which task is gone and waits for it, half of --timeout at most: a
# cluster manager that restarts it (Kubernetes' OnFailure, RESTART=on-failure bash run.sh) brings
# it back, a restarted chief joins the live θ and aggregates again, and the synchronous steps go
# on. If it does not come back in time, the worker tells the ps it is leaving (so that the ps
# names the dead task alone) and exits with the retryable code. With enough backup workers left
# it says so once and goes on. A ps that is lost and restarted takes the accumulators with it:
# the monitored session is re-created, the chief restores θ and this hook starts again.
#
# A chief killed inside an aggregation may have taken the round's N gradients from the
# accumulators without putting its M tokens in the queue (its step on the ps was cancelled in
# between): the workers that sent them would wait for a token forever, and its restarted self,
# short of their gradients, for them. So a restarted chief that joins the live θ puts one token
# for each other worker (M - 1), holding the current global step, in the queue, with its first
# step (when its session is made, the others would race ahead while it starts). A worker that
# waited takes one and sends a gradient again; one that did not wait takes one too, for one more
# step at the same θ (counted in the next update as a backup worker's is, or stale and
# dropped). Nobody waits forever, and then every update again puts M tokens for M steps.
class SynchronousTrainingHook(tf.train.SessionRunHook):
    """SyncReplicasOptimizer's start-up on every worker, the chief's aggregation loop and every
    worker's watch over its peers, as described above."""

    def __init__(self, args, server, graph, watchdog):
        self.args, self.server, self.watchdog = args, server, watchdog
        self.who = task_name("worker", args.task_index)
        self.is_chief = is_chief(args)
        optimizer, self.global_step = graph["optimizer"], graph["global_step"]
        # The chief sets the accumulators' step to global_step (it may have resumed or joined);
        # every worker starts its own step tag at global_step.
        self.init_op = optimizer.chief_init_op if self.is_chief else optimizer.local_step_init_op
        optimizer.ready_for_local_init_op.mark_used()  # MonitoredTrainingSession checks that
        # The chief's aggregations, as many as a quarter of --timeout allows, in one session.run
        # (each run must end within --timeout). It returns the global step after the last.
        self.aggregate = aggregations_on_the_ps(optimizer, graph["params"], self.global_step,
                                                args.train_steps, args.timeout / 4)
        # A restarted chief's tokens (see above), each holding the global step.
        self.release = optimizer.get_init_tokens_op(len(args.cluster["worker"]) - 1)
        self.rejoined = False
        self.stopped = threading.Event()
        self.session, self.threads = None, []

    def after_create_session(self, session, coord):
        """Each (re-)created session: its start-up op, one aggregation loop on the chief; the
        watch over the peers is started once and follows the newest session."""
        session.run(self.init_op)
        self.session = session
        loops = ([] if self.threads else [(self.watch_peers, ())]) + (
            [(self.aggregate_until_the_last_step, (session,))] if self.is_chief else [])
        for loop, loop_args in loops:
            self.threads.append(threading.Thread(target=loop, args=loop_args, daemon=True))
            self.threads[-1].start()

    def chief_joined(self):
        """Called by ChiefSessionCreator when this chief, restarted, joins the live θ; the
        session's after_create_session follows."""
        self.rejoined = True

    def before_run(self, run_context):
        """A chief that rejoined releases the workers with its first step, not when its session
        is made: they would race ahead meanwhile, taking its tokens too (a CI run saw worker1
        make 445 updates alone while the chief wrote its first checkpoint)."""
        return tf.train.SessionRunArgs([self.release, self.global_step]) if self.rejoined \
            else None

    def after_run(self, run_context, run_values):
        if self.rejoined:
            self.rejoined = False
            print("[%s] one token for each other worker, for global step %d, put in the "
                  "queue: a worker that waited for the update the chief's old self was making "
                  "goes on" % (self.who, run_values.results[1]), flush=True)

    def stop(self):
        """Called when the training loop ends, normally or not: from now on nothing is fatal."""
        self.stopped.set()

    def end(self, session):
        self.stop()
        for thread in self.threads:  # the aggregation is over; the watch ends within a poll
            thread.join(self.args.timeout)

    def aggregate_until_the_last_step(self, session):
        try:
            global_step = session.run(self.global_step)
            while global_step < self.args.train_steps:
                global_step = session.run(self.aggregate)
        except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError):
            return  # the ps was lost: the re-created session starts a new aggregation
        except tf.errors.OpError as error:
            self.fail("the aggregation stopped: %s (%s)"
                      % (why_stuck(self.args), error_line(error)))

    def watch_peers(self):
        cluster, workers = self.args.cluster, len(self.args.cluster["worker"])
        backups = workers - self.args.replicas_to_aggregate
        # The chief was up when it let this worker start; other workers count once they have
        # been seen (they may start late). A lost ps is the Watchdog's to report.
        seen, strikes, noticed, missed_since = {0}, {}, set(), None
        interval = 0.0  # the first look at once, then every 0.5 s
        while not self.stopped.wait(interval):
            interval = 0.5
            down = set(unreachable(cluster, "worker"))
            seen |= set(range(workers)) - down
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
            except (tf.errors.OpError, RuntimeError):  # (RuntimeError: a session closed while
                continue  # it was re-created) the ps went away too: the Watchdog says so
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
            # From here on this hook decides when the wait ends, so the Watchdog's own deadline
            # (no progress for --timeout) starts now, after this hook's. The message names the
            # peers that started the wait: others that give up waiting meanwhile are not the
            # cause, nor is a ps that goes away meanwhile.
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
