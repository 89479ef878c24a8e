# only where there is a ps
# -- main -----------------------------------------------------------------------------------------
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
    if args.job_name == "ps":
        return run_parameter_server(args, server)
    watchdog = Watchdog(args, server)
    try:
        # "started" at once, before a session that may wait for the chief, so that the ps
        # accounts for a worker that dies while it waits.
        tell_parameter_servers(args, server, b"started")
        return train(args, server, watchdog)
    except tf.errors.AbortedError as error:  # a monitored session re-creates itself instead
        print("[%s] error: a ps was restarted under this worker's session, which cannot be "
              "re-created here; start this worker again (%s)" % (who, error_line(error)),
              file=sys.stderr)
        return RETRYABLE_EXIT_CODE
    except (tf.errors.ResourceExhaustedError, tf.errors.PermissionDeniedError,
            tf.errors.FailedPreconditionError) as error:
        if not args.log_dir or args.log_dir not in error.message:
            raise
        print("[%s] error: --log_dir %s cannot take a checkpoint (%s): free space or fix its "
              "permissions, then start this worker again" % (who, args.log_dir,
                                                             error_line(error)),
              file=sys.stderr)
        return 1
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError) as error:
        print("[%s] error: %s (%s)" % (who, why_stuck(args, watchdog.reached, server),
                                       error_line(error)), file=sys.stderr)
        return RETRYABLE_EXIT_CODE
    finally:
        watchdog.stop()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
