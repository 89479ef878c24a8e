# -- The training loop's bookkeeping --------------------------------------------------------------
class TrainingLoop:
    """The loop's bookkeeping: the global step, the watchdog's tick, --step_delay, a
    progress line and an accuracy point every --log_every steps (TensorBoard with --log_dir)."""

    def __init__(self, args, sess, graph, watchdog):
        self.args, self.sess, self.graph, self.watchdog = args, sess, graph, watchdog
        self.who = task_name("worker", args.task_index)
        self.first_global_step = self.global_step = sess.run(graph["global_step"])
        self.local_steps, self.curve, self.slept = 0, [], 0.0
        self.losses = collections.deque(maxlen=args.log_every)
        self.summaries = (tf.summary.FileWriter(os.path.join(args.log_dir, self.who))
                          if args.log_dir else None)
        self.started = time.time()
        if self.global_step >= args.train_steps:
            print("[%s] this run is already complete: global step %d >= --train_steps %d%s; "
                  "nothing to train" % (self.who, self.global_step, args.train_steps,
                                         " (from --log_dir %s)" % args.log_dir
                                         if args.log_dir else ""), flush=True)

    def running(self):
        return self.global_step < self.args.train_steps

    def step(self, loss, global_step=None):
        """One session.run of local steps done: their losses, and the global step after it."""
        losses = np.ravel(loss)
        if global_step is not None:
            self.global_step = global_step
        self.watchdog.progress()
        logged = self.local_steps // self.args.log_every
        self.local_steps += len(losses)
        self.losses.extend(losses)
        if not np.isfinite(losses).all():
            print("[%s] error: the loss is %s at local step %d (global %d): lower "
                  "--learning_rate, or check load_data and model" % (
                      self.who, losses[~np.isfinite(losses)][0], self.local_steps,
                      self.global_step), file=sys.stderr, flush=True)
            raise SystemExit(1)
        if self.args.step_delay:  # (as slept, in RESULT: tools/emulate checks it)
            slept = time.monotonic()
            time.sleep(self.args.step_delay * len(losses))
            self.slept += time.monotonic() - slept
        if self.local_steps // self.args.log_every > logged:
            self.log(self.sess.run(self.graph["test_accuracy"]))

    def log(self, test_accuracy):
        """A progress line, a point of the accuracy curve and of TensorBoard's."""
        self.curve.append([round(time.time(), 3), int(self.global_step),
                           round(float(test_accuracy), 4)])
        self.to_tensorboard(test_accuracy)
        print("[%s] step %d (global %d) loss %.4f test accuracy %.4f %.0f steps/s"
              % (self.who, self.local_steps, self.global_step, np.mean(self.losses),
                 test_accuracy, self.local_steps / (time.time() - self.started)), flush=True)

    def exchanged(self, global_step):
        """An exchange with the ps that is not a local step: its global step."""
        self.global_step = global_step
        self.watchdog.progress()

    def finish(self):
        self.test_accuracy, self.global_step = self.sess.run(
            [self.graph["test_accuracy"], self.graph["global_step"]])
        if self.curve or not self.losses:
            self.to_tensorboard(self.test_accuracy)
        else:  # a run shorter than --log_every: one progress line all the same
            self.log(self.test_accuracy)
        if self.summaries:
            self.summaries.close()

    def to_tensorboard(self, test_accuracy):
        if self.summaries and self.losses:
            self.summaries.add_summary(tf.Summary(value=[
                tf.Summary.Value(tag="loss", simple_value=float(np.mean(self.losses))),
                tf.Summary.Value(tag="test_accuracy", simple_value=float(test_accuracy))]),
                global_step=int(self.global_step))
            self.summaries.flush()  # a process that the watchdog ends loses nothing written

    def report(self, **algorithm_fields):
        if self.args.step_delay:
            algorithm_fields["slept_seconds"] = round(self.slept, 3)
        report(self.args, self.who, self.local_steps, self.first_global_step, self.global_step,
               self.losses, self.test_accuracy, self.curve, self.started, **algorithm_fields)
        return 0
