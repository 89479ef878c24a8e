def cluster_from_flags(parser, args):
    """Returns ({'ps': [...], 'worker': [...]}, job_name, task_index) from the flags or, without
    them, from the engine that started this task: TF_CONFIG (Kubeflow's TFJob) or Slurm."""
    if not args.timeout > 0:
        parser.error("--timeout must be positive, got %g" % args.timeout)
    flags_given = any(getattr(args, name) is not None
                      for name in ("job_name", "task_index", "ps_hosts", "worker_hosts"))
    if not flags_given and os.environ.get("TF_CONFIG"):
        ps_hosts, worker_hosts, job_name, task_index = cluster_from_tf_config(
            parser, os.environ["TF_CONFIG"])
    elif not flags_given and os.environ.get("SLURM_JOB_ID") and os.environ.get("SLURM_PROCID"):
        ps_hosts, worker_hosts, job_name, task_index = cluster_from_slurm(parser, os.environ)
    else:
        def given(value, default):
            return default if value is None else value
        ps_hosts = given(args.ps_hosts, "localhost:2222" if uses_parameter_servers() else "")
        worker_hosts = given(args.worker_hosts, "localhost:2223,localhost:2224")
        job_name, task_index = given(args.job_name, "worker"), given(args.task_index, 0)
    cluster = {"ps": parse_host_list(parser, "ps hosts", ps_hosts, uses_parameter_servers()),
               "worker": parse_host_list(parser, "worker hosts", worker_hosts)}
    if not uses_parameter_servers() and (cluster["ps"] or job_name == "ps"):
        parser.error("this example has no parameter server (the workers exchange among "
                     "themselves): start workers only, without ps hosts")
    if job_name not in cluster:
        parser.error("unknown job name '%s': use 'ps' or 'worker'" % job_name)
    if not 0 <= task_index < len(cluster[job_name]):
        parser.error("task index %d is out of range: there are %d %s task(s)"
                     % (task_index, len(cluster[job_name]), job_name))
    every_host = cluster["ps"] + cluster["worker"]
    duplicates = sorted({host for host in every_host if every_host.count(host) > 1})
    if duplicates:
        parser.error("host:port used by more than one task: %s" % ", ".join(duplicates))
    port = int(cluster[job_name][task_index].rpartition(":")[2])
    probe = socket.socket()
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("", port))
    except OSError:
        parser.error("port %d is already in use on this machine: stop what holds it or pick "
                     "another port" % port)
    finally:
        probe.close()
    return cluster, job_name, task_index


def cluster_from_tf_config(parser, text):
    """(ps hosts, worker hosts, job, index) from TF_CONFIG as Kubeflow's TFJob writes it (its
    "environment" key is ignored). Worker 0 is the chief here and every worker evaluates, so the
    operator's chief, master and evaluator roles are refused, saying what to declare instead."""
    try:
        tf_config = json.loads(text)
        if isinstance(tf_config, dict) and "sparseCluster" in tf_config:
            parser.error("TF_CONFIG has a sparseCluster (a TFJob with enableDynamicWorker): every "
                         "task needs the whole cluster here, so leave enableDynamicWorker off")
        cluster, task = tf_config["cluster"], tf_config["task"]
        job_name, roles = str(task["type"]), set(cluster)
        for role in ("chief", "master"):
            if role in roles | {job_name}:
                parser.error("TF_CONFIG: a '%s' job is not used here: worker 0 is the chief, so "
                             "declare it as one more worker (in a TFJob: no %s replica, Worker "
                             "replicas + 1)" % (role, role.capitalize()))
        if "evaluator" in roles | {job_name}:
            parser.error("unknown job name 'evaluator' in TF_CONFIG: every worker evaluates the "
                         "test set itself, so drop the TFJob's Evaluator replica")
        if roles - {"ps", "worker"}:
            parser.error("TF_CONFIG: only 'ps' and 'worker' jobs are used here (worker 0 is the "
                         "chief), got %s" % sorted(roles))
        ps_hosts, worker_hosts = ",".join(cluster.get("ps", [])), ",".join(cluster["worker"])
        task_index = int(task["index"])
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        parser.error("TF_CONFIG must be JSON like {\"cluster\": {\"ps\": [...], \"worker\": "
                     "[...]}, \"task\": {\"type\": \"worker\", \"index\": 0}} (%s: %s)"
                     % (type(error).__name__, error))
    return ps_hosts, worker_hosts, job_name, task_index


def cluster_from_slurm(parser, environ):
    """(ps hosts, worker hosts, job, index) of this task of a Slurm job step, one Slurm task per
    TF task: the first $SLURM_PS_TASKS (default 1) are parameter servers, the others workers.
    Every task works out every task's address alone, so they are where srun's default block
    distribution puts them (node by node, in SLURM_STEP_NODELIST's order), and the i-th task on
    a node listens on 16384 + (job id mod 512) * 32 + i: ports 16384-32767, below Linux's
    ephemeral range, and two jobs that share a node collide only if their ids do mod 512."""
    if not environ.get("SLURM_STEP_NODELIST"):
        parser.error("Slurm: this is a job's batch script, not a task of a job step: start "
                     "every task with srun (see Cluster-Engines/slurm/train.sbatch)")
    try:
        nodes = expand_hostlist(environ["SLURM_STEP_NODELIST"])
        counts = expand_tasks_per_node(environ["SLURM_STEP_TASKS_PER_NODE"])
        rank, job_id = int(environ["SLURM_PROCID"]), int(environ["SLURM_JOB_ID"])
        here = (environ["SLURMD_NODENAME"], int(environ["SLURM_LOCALID"]))
        ps_tasks = int(environ.get("SLURM_PS_TASKS", "1"))
    except (ValueError, KeyError) as error:
        parser.error("Slurm: cannot read the step's environment (%s: %s)"
                     % (type(error).__name__, error))
    if len(nodes) != len(counts) or not 0 < max(counts) <= 32:
        parser.error("Slurm: SLURM_STEP_NODELIST=%s and SLURM_STEP_TASKS_PER_NODE=%s do not "
                     "match, or a node has more than 32 tasks"
                     % (environ["SLURM_STEP_NODELIST"], environ["SLURM_STEP_TASKS_PER_NODE"]))
    placement = [(node, local) for node, count in zip(nodes, counts) for local in range(count)]
    if not 0 < ps_tasks < len(placement):
        parser.error("Slurm: SLURM_PS_TASKS=%d of %d tasks leaves no worker or no ps: give "
                     "srun --ntasks more than SLURM_PS_TASKS" % (ps_tasks, len(placement)))
    if not 0 <= rank < len(placement) or placement[rank] != here:
        parser.error("Slurm: task %d runs on %s as local task %d, not where block distribution "
                     "puts it: start the tasks with srun --distribution=block" % ((rank,) + here))
    base = 16384 + job_id % 512 * 32
    hosts = ["%s:%d" % (node, base + local) for node, local in placement]
    job_name, task_index = ("ps", rank) if rank < ps_tasks else ("worker", rank - ps_tasks)
    return ",".join(hosts[:ps_tasks]), ",".join(hosts[ps_tasks:]), job_name, task_index


def expand_hostlist(text):
    """Slurm's compressed host list ('node[01-03,7],gpu1') as names, in its order, as
    `scontrol show hostnames` prints them (no process started: it may not be on every node)."""
    names, start, depth = [], 0, 0
    for at, char in enumerate(text + ","):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            names += expand_host(text[start:at])
            start = at + 1
    if depth or not all(names):
        raise ValueError("'%s' is not a Slurm host list" % text)
    return names


def expand_host(pattern):
    """'a[1-2]b[08-09]' -> a1b08, a1b09, a2b08, a2b09: each range keeps its zero padding."""
    head, bracket, rest = pattern.partition("[")
    if not bracket:
        return [pattern]
    ranges, _, tail = rest.partition("]")
    names = []
    for item in ranges.split(","):
        low, _, high = item.partition("-")
        for number in range(int(low), int(high or low) + 1):
            names += [head + str(number).zfill(len(low)) + name for name in expand_host(tail)]
    return names


def expand_tasks_per_node(text):
    """'2(x3),1' -> [2, 2, 2, 1]: tasks on each node of the step, in the node list's order."""
    counts = []
    for item in text.split(","):
        count, _, times = item.partition("(x")
        counts += [int(count)] * int(times.rstrip(")") or 1)
    return counts
