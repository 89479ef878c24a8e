"""The emulated network: one namespace per task, each with one link to a switch, shaped.

A bridge lives in a namespace of its own (the switch); every host (a ps or worker task) gets a
namespace with one address and one veth pair to the bridge. Both ends of a host's link are
shaped by an htb class at the host's rate, so that the link carries that many bits per second
each way (full duplex, like a NIC): traffic from the host is shaped on its side, traffic to it on
the switch's side. Nothing reaches the machine's own network: the bridge has no uplink.

Latency is not emulated: this kernel has no netem. What a message meets is the veth and
bridge's own delay (microseconds), the queue of the htb class when its link is busy (which is
where a saturated link's waiting comes from), and TensorFlow's own cost per message.

Every namespace's name starts with NAME_PREFIX and the pid of the process that made it, so that
namespaces left by a process that was killed before it could delete them (SIGKILL) are found
and deleted by the next one (sweep_stale_namespaces).
"""
import errno
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
import uuid

from .enter import enter_namespace

NAME_PREFIX = "emu-"
ENTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "enter.py")
SUBNET = "10.77.%d.%d"  # inside the switch only: /16, up to 65,000 hosts


class NetworkError(RuntimeError):
    """The machine cannot make the namespaces or the links (not root, no iproute2, ...)."""


def run(*command, check=True):
    """An iproute2 command; its error text in the exception."""
    try:
        done = subprocess.run(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NetworkError("%s: %s" % (" ".join(command), error))
    if check and done.returncode:
        raise NetworkError("%s: %s" % (" ".join(command), done.stderr.decode().strip()))
    return done.stdout.decode()


def can_make_namespaces():
    """None if this process can make network namespaces and shape links, else why not."""
    if os.geteuid() != 0:
        return "not root (network namespaces and tc need root)"
    for tool in ("ip", "tc"):
        if not any(os.access(os.path.join(path, tool), os.X_OK)
                   for path in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/sbin",
                                                                                "/sbin"]):
            return "no `%s` (iproute2)" % tool
    return None


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError as error:
        return error.errno == errno.EPERM
    return True


def sweep_stale_namespaces():
    """Delete the namespaces whose maker (the pid in their name) is gone; returns their names."""
    stale = []
    for line in run("ip", "netns", "list").splitlines():
        match = re.match(r"^(%s(\d+)-\S+)" % re.escape(NAME_PREFIX), line)
        if match and not alive(int(match.group(2))):
            stale.append(match.group(1))
    for name in stale:
        run("ip", "netns", "del", name, check=False)
    return stale


def rate_text(bits_per_second):
    return "%dbit" % int(bits_per_second)


class Network:
    """hosts: {name: link rate in bits/s, or None for an unshaped link}, e.g. {"ps0": 3.1e8,
    "worker0": 3.1e8}. Use it as a context manager: the namespaces are deleted on the way out,
    whatever happened."""

    def __init__(self, hosts):
        self.rates = dict(hosts)
        tag = "%d-%s" % (os.getpid(), uuid.uuid4().hex[:4])
        self.switch = "%s%s-sw" % (NAME_PREFIX, tag)
        self.namespaces, self.addresses, self.ports = {}, {}, {}
        for number, host in enumerate(self.rates):
            self.namespaces[host] = "%s%s-%s" % (NAME_PREFIX, tag, host)
            self.addresses[host] = SUBNET % (1 + number // 250, 1 + number % 250)
            self.ports[host] = "p%d" % number  # the switch's end of host's link
        self.created = []

    def __enter__(self):
        try:
            self.create()
        except BaseException:
            self.delete()
            raise
        return self

    def __exit__(self, *exc_info):
        self.delete()

    def create(self):
        reason = can_make_namespaces()
        if reason:
            raise NetworkError(reason)
        sweep_stale_namespaces()
        self._add_namespace(self.switch)
        run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for host, namespace in self.namespaces.items():
            self._add_namespace(namespace)
            run("ip", "-n", namespace, "link", "set", "lo", "up")
            port = self.ports[host]
            run("ip", "-n", self.switch, "link", "add", port, "type", "veth", "peer", "name",
                "eth0", "netns", namespace)
            run("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
            run("ip", "-n", namespace, "addr", "add", self.addresses[host] + "/16", "dev", "eth0")
            run("ip", "-n", namespace, "link", "set", "eth0", "up")
            if self.rates[host]:
                for ends in self.ends(host):
                    shape(*ends, self.rates[host])

    def _add_namespace(self, name):
        run("ip", "netns", "add", name)
        self.created.append(name)

    def ends(self, host):
        """host's link as (namespace, device): the host's end, then the switch's."""
        return (self.namespaces[host], "eth0"), (self.switch, self.ports[host])

    def delete(self):
        """Delete every namespace made (the links go with them). Safe to call twice."""
        while self.created:
            run("ip", "netns", "del", self.created.pop(), check=False)

    def python_command(self, host, python, script, args):
        """`python script args` run inside host's namespace: python enters it first
        (enter.py), so that the command is still `python some.py ...`."""
        return [python, ENTER, self.namespaces[host], script] + list(args)

    def counters(self):
        """{host: (bytes sent to the host, bytes sent by the host)} so far, from the switch's
        side of every link (one read, in the switch's namespace)."""
        return self.parse_counters(in_namespace(
            self.switch, lambda: open("/proc/thread-self/net/dev").read()))

    def parse_counters(self, text):
        """counters() from the text of the switch's /proc/net/dev."""
        seen = {}
        for line in text.splitlines()[2:]:
            name, fields = line.split(":", 1)
            numbers = fields.split()
            seen[name.strip()] = (int(numbers[8]), int(numbers[0]))  # (its tx, its rx)
        return {host: seen.get(port, (0, 0)) for host, port in self.ports.items()}


def shape(namespace, device, bits_per_second):
    """An htb root whose one class, the default, sends at most bits_per_second. Its leaf queue
    holds as many bytes as the link sends in QUEUE_SECONDS (at least a few packets), as a
    switch port's buffer would; TCP's segmentation offloads are left on, so htb sees the large
    segments the stack hands it: the rate holds on average, over a packet train."""
    rate = rate_text(bits_per_second)
    limit = max(int(bits_per_second / 8 * QUEUE_SECONDS), 64 * 1024)
    for command in (["qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default",
                     "1"],
                    ["class", "add", "dev", device, "parent", "1:", "classid", "1:1", "htb",
                     "rate", rate, "ceil", rate],
                    ["qdisc", "add", "dev", device, "parent", "1:1", "bfifo", "limit",
                     str(limit)]):
        run("ip", "netns", "exec", namespace, "tc", *command)


QUEUE_SECONDS = 0.05


def in_namespace(namespace, function, thread=True):
    """function() called in the namespace: in a thread of its own that joins it, or, with
    thread=False, in the calling thread, which then stays there (for a thread that exists
    for it)."""
    if not thread:
        enter_namespace(namespace)
        return function()
    outcome = {}

    def body():
        try:
            enter_namespace(namespace)
            outcome["value"] = function()
        except BaseException as error:  # handed to the caller
            outcome["error"] = error

    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


SEND_BLOCK = 1 << 18


def measure_link(network, sender, receiver, seconds=0.4, warmup=0.1, port=5201):
    """The rate (bits/s) a bulk TCP transfer achieves from sender to receiver through their
    links, after `warmup` seconds of slow start: what the shaped path delivers (TCP's goodput:
    a few per cent below the wire rate, which also carries the headers)."""
    ready, marks = threading.Event(), []

    def receive():
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((network.addresses[receiver], port))
            server.listen(1)
            server.settimeout(10)
            ready.set()
            connection, _ = server.accept()
            with connection:
                connection.settimeout(10)
                total, buffer = 0, bytearray(1 << 20)
                while True:
                    got = connection.recv_into(buffer)
                    if not got:
                        break
                    total += got
                    marks.append((time.monotonic(), total))

    receiver_thread = threading.Thread(
        target=lambda: in_namespace(network.namespaces[receiver], receive), daemon=True)
    receiver_thread.start()
    ready.wait(10)

    def send():  # (from a file, by sendfile: the kernel copies, so little CPU is needed)
        with tempfile.TemporaryFile() as source, socket.create_connection(
                (network.addresses[receiver], port), timeout=10) as out:
            source.write(bytes(SEND_BLOCK))
            source.flush()
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                out.sendfile(source, 0, SEND_BLOCK)

    in_namespace(network.namespaces[sender], send)
    receiver_thread.join(15)
    start = marks[0][0] + warmup if marks else 0
    kept = [mark for mark in marks if mark[0] >= start]
    if len(kept) < 2 or kept[-1][0] <= kept[0][0]:
        return None
    return 8.0 * (kept[-1][1] - kept[0][1]) / (kept[-1][0] - kept[0][0])


def measure_both_ways(network, one, other, tries=3, enough=float("inf")):
    """measure_link from one to other, then back, the best of `tries` each way, or of those
    up to the first that reaches `enough` bits/s: {"to_<other>": bits/s, "from_<other>":
    bits/s}, None where no try measured. What the shaped path can deliver is the best transfer:
    on a loaded machine a sender or a receiver that waits for a CPU measures less than the link
    carries, or nothing at all."""
    def best(sender, receiver):
        rates = []
        while len(rates) < tries and max(filter(None, rates), default=0) < enough:
            rates.append(measure_link(network, sender, receiver))
        return max(filter(None, rates), default=None)
    return {"to_" + other: best(one, other), "from_" + other: best(other, one)}
