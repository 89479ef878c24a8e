# -- The cluster, from the flags or TF_CONFIG -----------------------------------------------------
RETRYABLE_EXIT_CODE = 138  # "a peer was lost: start me again" (TFJob's ExitCode policy retries it)


def uses_parameter_servers():
    """False where the lesson sets PARAMETER_SERVERS = 0: the workers exchange among themselves."""
    return globals().get("PARAMETER_SERVERS", 1) > 0


def example_parser(doc, train_steps, learning_rate, batch_size=32, epilog=None):
    """The cluster's flags, then training's, with these defaults; the lesson adds its own."""
    parser = OneLineErrorParser(description=doc.split("\n\n")[0], epilog=epilog)
    cluster = parser.add_argument_group("cluster (default: %s, workers on localhost:2223,"
                                        "localhost:2224)" % ("one ps on localhost:2222"
                                                             if uses_parameter_servers()
                                                             else "no ps"))
    cluster.add_argument("--job_name", choices=["ps", "worker"],
                         help="this task's job: 'ps' holds the parameters, 'worker' trains")
    cluster.add_argument("--task_index", type=int,
                         help="this task's index within its job; worker 0 is the chief")
    cluster.add_argument("--ps_hosts", help="comma-separated host:port of every parameter server")
    cluster.add_argument("--worker_hosts", help="comma-separated host:port of every worker")
    cluster.add_argument("--timeout", type=float, default=60.0,
                         help="seconds without progress after which a task gives up on a peer "
                              "(one that never came up, died, froze or is cut off), exiting "
                              "with the retryable code %d" % RETRYABLE_EXIT_CODE)
    add_training_flags(parser, train_steps, learning_rate, batch_size)
    return parser


def parse_example_flags(parser, argv):
    """The command line (or TF_CONFIG), every mistake said before any server starts."""
    args = parser.parse_args(argv)
    check_training_flags(parser, args)
    args.cluster, args.job_name, args.task_index = cluster_from_flags(parser, args)
    check_log_dir(parser, args)
    return args


def cluster_from_flags(parser, args):
    """({'ps': [...], 'worker': [...]}, job_name, task_index) from the flags, or without them
    from TF_CONFIG (Kubeflow's TFJob; under Slurm, Cluster-Engines/slurm gives the flags)."""
    flags = {name: getattr(args, name) for name in ("job_name", "task_index", "ps_hosts",
                                                     "worker_hosts")}
    if all(value is None for value in flags.values()) and os.environ.get("TF_CONFIG"):
        flags = cluster_from_tf_config(parser, os.environ["TF_CONFIG"])
    elif flags["job_name"] is None or flags["task_index"] is None:  # who this is, said first
        flags = dict(flags, job_name=args.job_name or "worker", task_index=args.task_index or 0)
        print("[%s%d] no %s given: this task is %s %d" % (
            flags["job_name"], flags["task_index"], " or ".join(
                "--" + name for name in ("job_name", "task_index") if getattr(args, name) is None),
            flags["job_name"], flags["task_index"]), flush=True)
    job_name, task_index = flags["job_name"], flags["task_index"]
    defaults = {"ps": "localhost:2222" if uses_parameter_servers() else "",
                "worker": "localhost:2223,localhost:2224"}
    cluster = {}
    for job, default in defaults.items():
        given = flags[job + "_hosts"]
        cluster[job] = host_list(parser, job + " hosts", default if given is None else given)
    for job in ["worker"] + (["ps"] if uses_parameter_servers() else []):
        if not cluster[job]:
            parser.error("%s hosts: at least one host:port is needed" % job)
    if not uses_parameter_servers() and (cluster["ps"] or job_name == "ps"):
        parser.error("this example has no parameter server (the workers exchange among "
                     "themselves): start workers only, without ps hosts")
    if not 0 <= task_index < len(cluster[job_name]):
        parser.error("task index %d is out of range: there are %d %s task(s)"
                     % (task_index, len(cluster[job_name]), job_name))
    hosts = cluster["ps"] + cluster["worker"]
    if len(set(hosts)) < len(hosts):
        parser.error("host:port used by more than one task: %s" % ", ".join(
            sorted({host for host in hosts if hosts.count(host) > 1})))
    port = int(cluster[job_name][task_index].rpartition(":")[2])
    with socket.socket() as probe:
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("", port))
        except OSError:
            parser.error("port %d is already in use on this machine: stop what holds it or "
                         "pick another port" % port)
    return cluster, job_name, task_index


def host_list(parser, what, text):
    hosts = [host.strip() for host in text.split(",")] if text else []
    for host in hosts:
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit() or not 0 < int(port) < 65536:
            parser.error("%s: '%s' is not host:port with a port in 1-65535" % (what, host))
    return hosts


def cluster_from_tf_config(parser, text):
    """The flags from TF_CONFIG as Kubeflow's TFJob writes it; worker 0 is the chief and every
    worker evaluates, so chief, master and evaluator roles are refused, saying what to do."""
    try:
        tf_config = json.loads(text)
        if isinstance(tf_config, dict) and "sparseCluster" in tf_config:
            parser.error("TF_CONFIG has a sparseCluster (a TFJob with enableDynamicWorker): every "
                         "task needs the whole cluster here, so leave enableDynamicWorker off")
        cluster, task = tf_config["cluster"], tf_config["task"]
        roles = set(cluster) | {str(task["type"])}
        for role in sorted(roles & {"chief", "master"}):
            parser.error("TF_CONFIG: a '%s' job is not used here: worker 0 is the chief, so "
                         "declare it as one more worker (in a TFJob: no %s replica, Worker "
                         "replicas + 1)" % (role, role.capitalize()))
        if "evaluator" in roles:
            parser.error("unknown job name 'evaluator' in TF_CONFIG: every worker evaluates the "
                         "test set itself, so drop the TFJob's Evaluator replica")
        if roles - {"ps", "worker"}:
            parser.error("TF_CONFIG: only 'ps' and 'worker' jobs are used here (worker 0 is the "
                         "chief), got %s" % sorted(roles))
        return {"job_name": str(task["type"]), "task_index": int(task["index"]),
                "ps_hosts": ",".join(cluster.get("ps", [])),
                "worker_hosts": ",".join(cluster["worker"])}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        parser.error("TF_CONFIG must be JSON like {\"cluster\": {\"ps\": [...], \"worker\": "
                     "[...]}, \"task\": {\"type\": \"worker\", \"index\": 0}} (%s: %s)"
                     % (type(error).__name__, error))


def is_chief(args):
    return args.job_name == "worker" and args.task_index == 0


def task_name(job_name, task_index):
    return "%s%d" % (job_name, task_index)


def check_log_dir(parser, args):
    """The chief writes --log_dir: one that cannot hold a checkpoint is bad input, said now."""
    if not args.log_dir or not is_chief(args):
        return
    if os.path.exists(args.log_dir) and not os.path.isdir(args.log_dir):
        parser.error("--log_dir %s is a file, not a directory: name a directory" % args.log_dir)
    probe = os.path.join(args.log_dir, ".write-test-%d" % os.getpid())
    try:
        os.makedirs(args.log_dir, exist_ok=True)
        with open(probe, "w") as file:
            file.write("x" * 4096)
        os.remove(probe)
    except OSError as error:
        parser.error("--log_dir %s cannot be written (%s): name a writable directory with free "
                     "space" % (args.log_dir, error.strerror or error))


def claim_log_dir(args, who):
    """The chief locks --log_dir while it runs (two runs' checkpoints would interleave)."""
    if not args.log_dir or not is_chief(args):
        return True
    args.log_dir_lock = open(os.path.join(args.log_dir, ".lock"), "a+")
    try:
        fcntl.flock(args.log_dir_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        args.log_dir_lock.seek(0)
        print("[%s] error: --log_dir %s is in use by another run (%s): give each run its own "
              "--log_dir" % (who, args.log_dir, args.log_dir_lock.read().strip() or "running"),
              file=sys.stderr)
        return False
    args.log_dir_lock.truncate(0)
    args.log_dir_lock.write("pid %d on %s" % (os.getpid(), socket.gethostname()))
    args.log_dir_lock.flush()
    return True


def session_config(args):
    """Few threads, bounded waits, and no chatter with the other workers (without a ps, worker 0
    leads the collective ops and holds the end-of-run queues)."""
    config = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=2,
                            operation_timeout_in_ms=int(args.timeout * 1000),
                            device_filters=["/job:ps", "/job:%s/task:%d" % (args.job_name,
                                                                             args.task_index)])
    if not args.cluster["ps"]:
        config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
        config.device_filters.append("/job:worker/task:0")
    return config
