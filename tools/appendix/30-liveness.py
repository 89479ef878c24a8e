# -- Liveness: who is silent, and for how long ----------------------------------------------------
class Watchdog:
    """Liveness by progress: a worker that waits --timeout s for a silent peer says which
    one and exits with the retryable code; it also sends the ps a heartbeat."""

    def __init__(self, args, server):
        self.args, self.server = args, server
        self.who = task_name(args.job_name, args.task_index)
        # The thread that makes the watchdog trains: main() does, and Linux numbers the main
        # thread with the process id (Python 3.8+ could ask threading.get_native_id()).
        self.trainer = "/proc/self/task/%d/schedstat" % os.getpid()
        self.progress_made = True
        self.reached = {"ps": set(), "worker": set()}  # tasks whose port took a connection
        self.stopped = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()
        self.heartbeat = threading.Thread(target=self._heartbeat, daemon=True)
        self.heartbeat.start()

    def progress(self):
        self.progress_made = True  # (a flag: this runs at every step, so it must cost nothing)

    def stop(self):
        """No more checks; the heartbeat's session closes before the process exits."""
        self.stopped.set()
        self.heartbeat.join(heartbeat_interval(self.args) + 5.0)

    def busy(self):
        """Seconds the training thread ran or waited for a CPU (schedstat; 0 if unreadable)."""
        try:
            with open(self.trainer) as schedstat:
                running, queued = schedstat.read().split()[:2]
            return (int(running) + int(queued)) / 1e9
        except (OSError, ValueError):
            return 0.0

    def _watch(self):
        everyone = {job: set(range(len(hosts))) for job, hosts in self.args.cluster.items()}
        waited, then, busy_then, said = 0.0, time.monotonic(), self.busy(), False
        while not self.stopped.wait(0.5):
            for job in everyone:  # (only to tell "never came up" apart, until all were seen)
                if self.reached[job] != everyone[job]:
                    self.reached[job] |= everyone[job] - set(unreachable(self.args.cluster, job))
            late = sorted(everyone["worker"] - self.reached["worker"])
            if waited > 5.0 and late and not said and not self.args.cluster["ps"]:
                print("[%s] waiting for %s to come up" % (
                    self.who, describe(self.args.cluster, "worker", late)), flush=True)
                said = True  # (with a ps, the ps and the chief are the ones waited for)
            now, busy_now = time.monotonic(), self.busy()
            waited = 0.0 if self.progress_made else waited + max(
                0.0, (now - then) - (busy_now - busy_then))
            self.progress_made, then, busy_then = False, now, busy_now
            if waited > self.args.timeout and not self.stopped.is_set():
                print("[%s] error: no progress for %.0f s (--timeout %g): %s" % (
                    self.who, waited, self.args.timeout,
                    why_stuck(self.args, self.reached, self.server)),
                    file=sys.stderr, flush=True)
                os._exit(RETRYABLE_EXIT_CODE)

    def _heartbeat(self):
        with tf.Graph().as_default():
            beats = [queue.enqueue((self.args.task_index, b"alive"))
                     for queue in status_queues(self.args.cluster)]
            sess = None
            while not self.stopped.wait(heartbeat_interval(self.args)):
                try:
                    # A new session only towards ps ports that take connections; an open one
                    # beats on its own connections (a port flooded by others may take no more).
                    if sess is None and beats and not unreachable(self.args.cluster, "ps"):
                        sess = tf.Session(self.server.target, config=session_config(self.args))
                    if sess is not None:
                        sess.run(beats)
                except tf.errors.OpError:
                    sess = None  # a restarted ps knows no old session: the next beat opens one
                    # (the old one is left open: closing a session whose ps is gone can block)
            if sess is not None:
                sess.close()


def heartbeat_interval(args):
    return min(max(args.timeout / 5.0, 0.2), 5.0)


def why_stuck(args, reached=None, server=None):
    """Which task is silent, and whether it never came up or stopped answering."""
    if getattr(args, "waiting_for_the_chief", False):  # (the ps may have given up on it too)
        return "the chief, %s, %s" % (describe(args.cluster, "worker", [0]), (
            "never came up (nothing listens on its port)" if 0 in unreachable(
                args.cluster, "worker") else "has not made θ ready"))
    down = unreachable(args.cluster, "ps")
    if down:  # a port that refused one connection may be busy: it is down if it refuses twice
        time.sleep(0.5)
        down = sorted(set(down) & set(unreachable(args.cluster, "ps")))
    if down:
        return "lost the parameter server: %s" % "; ".join(
            "%s %s" % (describe(args.cluster, "ps", [index]),
                       "stopped answering (its port takes no connection)"
                       if reached is None or index in reached["ps"]
                       else "never came up (nothing listens on its port)") for index in down)
    frozen = [index for index in range(len(args.cluster["ps"]))
              if server is not None and not answers(args, server, index)]
    if frozen:
        return ("lost the parameter server: %s accepts connections but does not answer (frozen "
                "or cut off)" % describe(args.cluster, "ps", frozen))
    silent = unreachable(args.cluster, "worker")
    if silent:
        return "not answering: %s" % "; ".join("%s%s" % (
            describe(args.cluster, "worker", [index]), " never came up (nothing listens on its "
            "port)" if reached is not None and index not in reached["worker"] else "")
            for index in silent)
    if not args.cluster["ps"]:
        return ("every worker accepts connections, so one that this one waits for (in a "
                "collective op or an exchange with a peer) is frozen or cut off")
    return ("every task accepts connections and the ps answers, so a worker that this one "
            "waits for is frozen or cut off: the ps's log names the one it no longer hears from")


def error_line(error):
    """The line of a TensorFlow error that says what went wrong (TF 1.x and 2.x)."""
    lines = [line.strip() for line in error.message.splitlines() if line.strip()]
    if lines and lines[0].startswith("Graph execution error"):
        after_node = [i + 1 for i, line in enumerate(lines) if line.startswith("Node: ")]
        lines = lines[after_node[-1] if after_node else 1:]
    remote = error.message.partition('"grpc_message":"')[2].rpartition('","grpc_status"')[0]
    lines = [remote] if remote else [line for line in lines if not line.startswith((
        "From /job:", "Additional GRPC error information"))]  # (a peer's error, relayed)
    return lines[0] if lines else type(error).__name__


def answers(args, server, ps_index, seconds=3.0):
    """Whether a ps task answers a small request within a few seconds (from a thread)."""
    answered = threading.Event()

    def ask():
        with tf.Graph().as_default():
            size = status_queues(args.cluster)[ps_index].size()
            with tf.Session(server.target, config=session_config(args)) as sess:
                sess.run(size, options=tf.RunOptions(timeout_in_ms=int(seconds * 1000)))
                answered.set()

    threading.Thread(target=ask, daemon=True).start()
    return answered.wait(seconds + 1.0)


def unreachable(cluster, job_name):
    """Indices of a job's tasks whose port accepts no connection."""
    import errno
    dead = []
    for index, host in enumerate(cluster[job_name]):
        name, _, port = host.rpartition(":")
        try:
            socket.create_connection((name, int(port)), timeout=1.0).close()
        except OSError as error:
            if error.errno not in (errno.EMFILE, errno.ENFILE):  # this process is out of file
                dead.append(index)  # descriptors (a connection flood): no news of the peer
    return dead


def describe(cluster, job_name, indices):
    return ", ".join("%s (%s)" % (task_name(job_name, index), cluster[job_name][index])
                     for index in indices)


def status_queues(cluster):
    """One queue per ps on which each worker says b"started", b"alive" and b"done"."""
    workers = len(cluster["worker"])
    queues = []
    for index in range(len(cluster["ps"])):
        with tf.device("/job:ps/task:%d" % index):
            queues.append(tf.FIFOQueue(16 * workers, [tf.int32, tf.string],
                                       shared_name="status_queue%d" % index,
                                       name="status_queue%d" % index))
    return queues
