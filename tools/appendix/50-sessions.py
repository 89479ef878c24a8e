# only where there is a ps
# -- Sessions: the chief initializes, restores or joins θ -----------------------------------------
@contextlib.contextmanager
def training_session(args, server, graph, watchdog, hooks=(), scaffold=None, config=None):
    """A MonitoredSession with the lifecycle every example shares; yields (sess, loop)."""
    hooks, scaffold = list(hooks), scaffold or tf.train.Scaffold()
    config = config or session_config(args)
    if is_chief(args):
        hooks.append(CloseReadyQueueHook())
        if args.log_dir:
            hooks.append(SaveAtTheEndHook(args.log_dir, scaffold=scaffold,
                                          save_steps=args.checkpoint_every))
        creator = ChiefSessionCreator(args, server, scaffold, config, hooks)
    else:
        creator = AfterTheChiefSessionCreator(args, server, scaffold, config)
    session = tf.train.MonitoredSession(session_creator=creator, hooks=hooks)
    with session as sess:
        loop = TrainingLoop(args, sess, graph, watchdog)
        try:
            yield sess, loop
        finally:
            for hook in hooks:
                getattr(hook, "stop", lambda: None)()
        loop.finish()
    tell_parameter_servers(args, server, b"done")


class ChiefSessionCreator(tf.train.SessionCreator):
    """The chief's session: it joins a live θ, or restores or initializes one."""

    def __init__(self, args, server, scaffold, config, hooks=()):
        self.args, self.server, self.scaffold, self.config = args, server, scaffold, config
        self.hooks = hooks

    def create_session(self):
        tell_parameter_servers(self.args, self.server, b"started")  # (see AfterTheChief...)
        self.scaffold.finalize()
        if theta_on_the_ps(self.args, self.server, self.scaffold.ready_for_local_init_op):
            for hook in self.hooks:
                getattr(hook, "chief_joined", lambda: None)()
            return tf.train.WorkerSessionCreator(self.scaffold, self.server.target,
                                                 self.config).create_session()
        return tf.train.ChiefSessionCreator(
            self.scaffold, self.server.target, self.config,
            checkpoint_filename_with_path=newest_intact_checkpoint(self.args)).create_session()


class AfterTheChiefSessionCreator(tf.train.SessionCreator):
    """A non-chief's session, made once the chief has θ ready."""

    def __init__(self, args, server, scaffold, config):
        self.args, self.server = args, server
        self.worker = tf.train.WorkerSessionCreator(scaffold, server.target, config)

    def create_session(self):
        # "started" to every ps at each (re-)created session, before the wait: a restarted ps
        # that hears nothing from a worker within --timeout of its own start calls it never up,
        # and the chief's restore may take that long (TF 2.x, a loaded machine).
        tell_parameter_servers(self.args, self.server, b"started")
        wait_until_chief_is_ready(self.args, self.server)
        return self.worker.create_session()


class CloseReadyQueueHook(tf.train.SessionRunHook):
    """Closes the ready queue once the chief's session holds θ."""

    def __init__(self):
        queue = ready_queue()
        self._is_closed, self._close = queue.is_closed(), queue.close()

    def after_create_session(self, session, coord):
        if not session.run(self._is_closed):
            session.run(self._close)
