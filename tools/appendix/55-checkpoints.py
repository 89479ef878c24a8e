# -- Checkpoints ----------------------------------------------------------------------------------
class SaveAtTheEndHook(tf.train.CheckpointSaverHook):
    """A checkpoint every --checkpoint_every global steps, and always one at the end."""

    def end(self, session):
        self._timer.reset()  # (the step of the last save is forgotten: end() saves)
        super().end(session)


def newest_intact_checkpoint(args):
    """The newest checkpoint whose every tensor reads back; damaged ones are skipped."""
    state = args.log_dir and tf.train.get_checkpoint_state(args.log_dir)
    if not state:
        return None
    for path in reversed(list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]):
        try:
            reader = tf.train.NewCheckpointReader(path)
            for name in reader.get_variable_to_shape_map():
                reader.get_tensor(name)
            print("[worker0] resuming from %s" % path, flush=True)
            return path
        except (tf.errors.OpError, ValueError, RuntimeError, IndexError) as error:
            # (TF 2.x raises IndexError for a truncated data file, TF 1.15 DataLossError)
            print("[worker0] checkpoint %s is damaged (%s); trying the one before"
                  % (path, str(error).splitlines()[0][:120]), file=sys.stderr, flush=True)
    print("[worker0] no intact checkpoint in %s: starting from the initial θ" % args.log_dir,
          file=sys.stderr, flush=True)
    return None
