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
    except tf.errors.AbortedError as error:
        print("[%s] error: a peer worker was restarted or ended under this worker's session, "
              "which cannot be re-created here; start this worker again (%s)"
              % (who, error_line(error)), file=sys.stderr)
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
