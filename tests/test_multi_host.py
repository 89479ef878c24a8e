"""Several hosts for real: a ps and two workers in three network namespaces with their own IP
addresses, joined by veth links to a bridge; then one worker's link is cut mid-run.

Needs root (ip netns); elsewhere these tests are skipped, saying why."""
import os
import subprocess
import uuid

import pytest

from helpers import LocalCluster, assert_no_process_left, example, output, worker_results

SUBNET = "10.199.%d.%d"
HOSTS = ("ps0", "worker0", "worker1")
# One synchronous and one asynchronous example (when present), plus the base set-up.
EXAMPLES = [path for path in ("Distributed-Setup/dist_setup.py", "Synchronous-SGD/ssgd.py",
                              "Hogwild/Hogwild.py") if os.path.exists(example(path))]


def ip(*args):
    subprocess.run(["ip"] + list(args), check=True, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, timeout=30)


class Network:
    """A bridge in a 'switch' namespace and one namespace per host, each with one address."""

    def __init__(self):
        tag = uuid.uuid4().hex[:6]
        self.switch = "dtfg-%s-sw" % tag
        self.namespaces = {host: "dtfg-%s-%s" % (tag, host) for host in HOSTS}
        self.links = {host: "v%s%d" % (tag, number) for number, host in enumerate(HOSTS)}
        self.subnet = int(tag[:2], 16)
        self.addresses = {host: SUBNET % (self.subnet, number + 1)
                          for number, host in enumerate(HOSTS)}

    def create(self):
        ip("netns", "add", self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        for host, namespace in self.namespaces.items():
            ip("netns", "add", namespace)
            ip("-n", namespace, "link", "set", "lo", "up")
            link = self.links[host]
            ip("link", "add", link, "netns", self.switch, "type", "veth", "peer", "name",
               "eth0", "netns", namespace)
            ip("-n", self.switch, "link", "set", link, "master", "br0", "up")
            ip("-n", namespace, "addr", "add", self.addresses[host] + "/24", "dev", "eth0")
            ip("-n", namespace, "link", "set", "eth0", "up")

    def cut(self, host):
        ip("-n", self.switch, "link", "set", self.links[host], "down")

    def restore(self, host):
        ip("-n", self.switch, "link", "set", self.links[host], "up")

    def delete(self):
        for namespace in list(self.namespaces.values()) + [self.switch]:
            subprocess.run(["ip", "netns", "del", namespace], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)


@pytest.fixture
def network():
    net = Network()
    try:
        net.create()
    except (OSError, subprocess.CalledProcessError) as error:
        net.delete()
        pytest.skip("cannot create network namespaces here (needs root and iproute2): %s"
                    % getattr(error, "stderr", error))
    yield net
    net.delete()
    leftover = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE).stdout.decode()
    assert net.switch not in leftover


def start(net, script, args):
    cluster = LocalCluster(example(script), workers=2, echo=False, args=args,
                           ports=[2222, 2222, 2222])
    cluster.ps_hosts = ["%s:2222" % net.addresses["ps0"]]
    cluster.worker_hosts = ["%s:2222" % net.addresses[host] for host in ("worker0", "worker1")]
    for task in cluster.tasks:
        cluster.start_task(task, ["ip", "netns", "exec", net.namespaces[task.name]]
                           + cluster.command(task))
    return cluster


@pytest.mark.parametrize("script", EXAMPLES)
def test_a_cluster_across_three_hosts_trains(network, script):
    cluster = start(network, script, ["--train_steps", "400"])
    try:
        assert cluster.wait(180), output(cluster)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert set(cluster.returncodes().values()) == {0}, output(cluster)
    assert len(worker_results(cluster)) == 2


def test_cutting_a_workers_link_ends_everything_in_bounded_time(network):
    script = "Hogwild/Hogwild.py" if "Hogwild/Hogwild.py" in EXAMPLES else EXAMPLES[0]
    cluster = start(network, script, ["--train_steps", "5000", "--log_every", "100",
                                      "--timeout", "8"])
    try:
        assert cluster.wait_for_line("worker1", r"step 100 ", 180), output(cluster)
        network.cut("worker1")
        # worker1 loses the ps and gives up after --timeout with the retryable code; worker0
        # trains on to the end; the ps then reports worker1 as lost and exits.
        assert cluster.wait(120, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert cluster.returncodes() == {"ps0": 1, "worker0": 0, "worker1": 138}, output(cluster)
    assert cluster.task("worker0").result()["global_step"] >= 5000
    assert "lost the parameter server: ps0 (%s:2222) stopped answering" % (
        network.addresses["ps0"]) in output(cluster, "worker1")
    assert "worker1" in output(cluster, "ps0") and cluster.task("ps0").returncode == 1


def test_a_link_flap_shorter_than_the_timeout_is_ridden_out(network):
    """The ps's link goes down for 3 s and comes back. Liveness is judged by progress over
    --timeout (10 s), not by one failed look at a port: nobody gives up, training completes."""
    script = "Hogwild/Hogwild.py" if "Hogwild/Hogwild.py" in EXAMPLES else EXAMPLES[0]
    cluster = start(network, script, ["--train_steps", "4000", "--log_every", "100",
                                      "--timeout", "10"])
    try:
        assert cluster.wait_for_line("worker1", r"step 100 ", 180), output(cluster)
        network.cut("ps0")
        cut_at = len(cluster.task("worker0").lines)
        # 3 s without the ps, measured by what the workers no longer print.
        assert not cluster.wait_for(lambda: cluster.failed(), 3), output(cluster)
        network.restore("ps0")
        assert cluster.wait(120, stop_on_failure=False), output(cluster)
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert set(cluster.returncodes().values()) == {0}, output(cluster)
    assert len(cluster.task("worker0").lines) > cut_at, "worker0 trained on after the flap"
    assert all(r["global_step"] >= 4000 for r in worker_results(cluster))
