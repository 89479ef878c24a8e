# only where PARAMETER_SERVERS = 0
# -- main, without a ps ---------------------------------------------------------------------------
def take_the_hard_descriptor_limit():
    """A gRPC server out of file descriptors stops serving (TF 1.15): raise the soft limit."""
    import resource  # (here, not at the top: the lesson's imports are the lesson's)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # an unlimited hard limit is above the kernel's nr_open
        pass


def main(argv=None):
    args = parse_flags(argv)
    who = task_name(args.job_name, args.task_index)
    if not (check_model_and_data(args, who, len(args.cluster["worker"]))
            and claim_log_dir(args, who)):
        return 2
    take_the_hard_descriptor_limit()
    server = tf.train.Server(tf.train.ClusterSpec(args.cluster), job_name=args.job_name,
                             task_index=args.task_index, config=session_config(args))
    watchdog = Watchdog(args, server)
    try:
        code = train(args, server, watchdog)
        finish_among_workers(args, server, watchdog)
        return code
    except (tf.errors.AbortedError, tf.errors.FailedPreconditionError,
            tf.errors.ResourceExhaustedError, tf.errors.PermissionDeniedError) as error:
        if args.log_dir and args.log_dir in error.message:
            print("[%s] error: --log_dir %s cannot take a checkpoint (%s): free space or fix its "
                  "permissions, then start this worker again" % (who, args.log_dir,
                                                                 error_line(error)),
                  file=sys.stderr)
            return 1
        if isinstance(error, (tf.errors.ResourceExhaustedError, tf.errors.PermissionDeniedError)):
            raise
        print("[%s] error: %s was restarted or ended under this worker's session, which cannot "
              "be re-created without a ps; start this worker again (%s)"
              % (who, restarted_peer(args, error), error_line(error)), file=sys.stderr)
        return RETRYABLE_EXIT_CODE
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError) as error:
        print("[%s] error: %s (%s)" % (who, why_stuck(args, watchdog.reached, server),
                                       error_line(error)), file=sys.stderr)
        return RETRYABLE_EXIT_CODE
    finally:
        watchdog.stop()


def restarted_peer(args, error):
    """The other worker a TensorFlow error names ("... task:1 ... was probably restarted")."""
    tasks = [text[:len(text) - len(text.lstrip("0123456789"))]
             for text in error.message.split("/job:worker/replica:0/task:")[1:]]
    named = {int(task) for task in tasks if task} - {args.task_index}
    return describe(args.cluster, "worker", sorted(named)) if named else "a peer worker"


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)

