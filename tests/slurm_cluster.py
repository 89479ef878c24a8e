"""A real single-node Slurm for the tests: munged, slurmctld and slurmd from Debian's packages,
configured in a temporary directory, run in the foreground as this test process's children and
stopped by PID. The node is declared with more CPUs than the machine has
(SlurmdParameters=config_overrides), so that a 2-core machine runs a 4-task job."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from helpers import free_ports

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "sinfo", "squeue",
            "scancel")
NODE = "localhost"  # resolves everywhere, so the TensorFlow tasks can reach each other by it
CPUS = 8
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE")
CONFIG = """\
ClusterName=tests
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also delays a requeued job's start: by cred_expire + 1 s, 6 s here (5 is the least
# Slurm takes), 121 s by default
AuthInfo=socket={base}/run/munge.socket,cred_expire=5
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/run/slurmctld.pid
SlurmdPidFile={base}/run/slurmd.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd.log
PlugStackConfig={base}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# look at pending jobs every second (a requeued job becomes eligible with no event to wake on)
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
ReturnToService=2
KillWait=5
SlurmdParameters=config_overrides
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=tests Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class SlurmUnavailable(Exception):
    """Slurm is not installed, or did not start: why, in one line (a skip reason)."""


class SingleNodeSlurm:
    def __init__(self, bound=30.0):
        missing = [name for name in BINARIES if not shutil.which(name)]
        if missing:
            raise SlurmUnavailable(
                "Slurm is not installed (%s missing): apt-get install slurmctld slurmd "
                "slurm-client munge (.ci/run does)" % ", ".join(missing))
        if os.geteuid() != 0:
            raise SlurmUnavailable("slurmd runs jobs as their users, so it needs root")
        self.bound = bound
        self.daemons = []  # (name, Popen), in the order started
        # munged wants every directory above its socket traversable by all, which pytest's
        # tmp_path (under a 0700 directory) is not.
        self.base = tempfile.mkdtemp(prefix="slurm-tests-")
        os.chmod(self.base, 0o755)
        self.conf = os.path.join(self.base, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        for name in ("TF_CONFIG", "SLURM_JOB_ID", "SLURM_PROCID"):
            self.env.pop(name, None)

    def start(self):
        try:
            self._start()
        except SlurmUnavailable:
            self.stop()
            raise
        return self

    def _start(self):
        for name, mode in (("munge", 0o700), ("run", 0o755), ("state", 0o755),
                           ("spool", 0o755), ("log", 0o755)):
            os.makedirs(os.path.join(self.base, name), mode)
            os.chmod(os.path.join(self.base, name), mode)
        key = os.path.join(self.base, "munge", "munge.key")
        with open(key, "wb") as file:
            file.write(os.urandom(1024))
        os.chmod(key, 0o400)
        open(os.path.join(self.base, "plugstack.conf"), "w").close()
        ctld_port, slurmd_port = free_ports(2)
        with open(self.conf, "w") as file:
            file.write(CONFIG.format(base=self.base, node=NODE, cpus=CPUS, ctld_port=ctld_port,
                                     slurmd_port=slurmd_port))
        socket_path = os.path.join(self.base, "run", "munge.socket")
        self._daemon("munged", ["munged", "-F", "--key-file", key, "--socket", socket_path,
                                "--pid-file", os.path.join(self.base, "run", "munged.pid"),
                                "--seed-file", os.path.join(self.base, "munge", "seed"),
                                "--log-file", os.path.join(self.base, "log", "munged.log")])
        self._until("munged's socket", lambda: os.path.exists(socket_path))
        self._daemon("slurmctld", ["slurmctld", "-D", "-c", "-i"])
        self._daemon("slurmd", ["slurmd", "-D", "-c", "-N", NODE])
        self._until("the node to be idle", lambda: self.run(
            "sinfo", "-h", "-n", NODE, "-o", "%t", check=False).strip() == "idle")

    def _daemon(self, name, command):
        log = open(os.path.join(self.base, "log", name + ".out"), "wb")
        self.daemons.append((name, subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=self.env, start_new_session=True)))

    def _until(self, what, condition):
        """Wait for a daemon's condition (nothing signals it: poll), or say why it failed."""
        deadline = time.monotonic() + self.bound
        while not condition():
            dead = [(name, process.returncode) for name, process in self.daemons
                    if process.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise SlurmUnavailable("Slurm did not start (waiting for %s; %s): %s" % (
                    what, ", ".join("%s exited %d" % item for item in dead) or "timed out",
                    self.log_tail()))
            time.sleep(0.1)

    def log_tail(self, lines=3):
        tails = []
        for name in ("munged", "slurmctld", "slurmd"):
            for path in (os.path.join(self.base, "log", name + ".log"),
                         os.path.join(self.base, "log", name + ".out")):
                if os.path.exists(path):
                    text = open(path, errors="replace").read().strip().splitlines()[-lines:]
                    tails += ["%s: %s" % (name, line) for line in text]
        return " | ".join(tails)

    def run(self, *command, check=True, timeout=30):
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=self.env, timeout=timeout)
        text = done.stdout.decode("utf-8", "replace")
        if check and done.returncode:
            raise AssertionError("%s exited %d: %s" % (" ".join(command), done.returncode, text))
        return text

    def submit(self, script, args=(), options=(), env=None, cwd=None):
        """sbatch; returns the job id."""
        command = ["sbatch", "--parsable"] + list(options) + [script] + list(args)
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, cwd=cwd, timeout=30,
                              env=dict(self.env, **(env or {})))
        text = done.stdout.decode("utf-8", "replace").strip()
        assert done.returncode == 0, text
        return text.split(";")[0]

    def job(self, job_id):
        """scontrol's record of the job: {'JobState': 'COMPLETED', 'ExitCode': '0:0', ...}."""
        return dict(re.findall(r"(\w+)=(\S*)", self.run("scontrol", "-o", "show", "job", job_id)))

    def wait(self, job_id, timeout):
        """Wait until the job has ended (for good: a requeued job goes on); returns its record.
        Slurm sends no event a client can wait on, so scontrol is asked every 0.2 s."""
        deadline = time.monotonic() + timeout
        while True:
            record = self.job(job_id)
            if record.get("JobState") in ENDED:
                return record
            assert time.monotonic() < deadline, "job %s not ended in %g s: %s" % (
                job_id, timeout, record)
            time.sleep(0.2)

    def stop(self):
        """Cancel what is left, then end the daemons, newest first, by PID."""
        if any(name == "slurmctld" and process.poll() is None for name, process in self.daemons):
            self.run("scancel", "--full", "--partition", "tests", check=False)
            deadline = time.monotonic() + self.bound
            while self.run("squeue", "-h", check=False).strip() and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
        for name, process in reversed(self.daemons):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(self.bound)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        shutil.rmtree(self.base, ignore_errors=True)


def processes_of_job(job_id):
    """PIDs of the live processes (not zombies) that belong to a Slurm job, by their
    environment."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
            state = open("/proc/%s/stat" % pid).read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z" and ("SLURM_JOB_ID=%s" % job_id).encode() in environ:
            found.append(int(pid))
    return found


def task_process(job_id, rank, script):
    """The PID of the example's own process for Slurm task `rank` of the job, or None."""
    for pid in processes_of_job(job_id):
        try:
            environ = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
            argv = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if ("SLURM_PROCID=%d" % rank).encode() in environ and os.path.basename(
                argv[0]).startswith(b"python") and script.encode() in argv[1]:
            return pid
    return None
