"""The real settings the emulated cluster stands for, and the one factor that scales them.

A scenario names a real model (its parameter count: the bytes of θ, of g, of Δ or of a replica),
the real time one worker takes to compute one minibatch's gradient, how that time varies across
workers, and the real rate of each task's network link. The emulation runs it SCALE times
faster, with every quantity scaled by the one factor F = SCALE so that the proportions hold:

    compute time per step   real / F        (the worker sleeps it: --step_delay)
    link rate               real / F        (htb on each task's link)
    message bytes           real / F²       (θ's extra variable: --payload_mb)

so that a transfer takes (bytes / F²) / (rate / F) = real time / F, like the compute; the ratio
of computation to communication, the point where a ps link saturates and the share of a step
spent waiting are those of the real cluster, while a run lasts 1/F of the real time and the
CPUs move 1/F of the real byte rate. What is not scaled: each message's latency (not emulated;
see network.py) and TensorFlow's own cost per step and per message on this machine, which the
measurements report.
"""
import math
import random

SCALE = 10  # F: durations and link rates ÷ F, message bytes ÷ F²
MIB = 2 ** 20


class Model:
    """A real network, by its parameter count (float32: 4 bytes each)."""

    def __init__(self, name, parameters, source):
        self.name, self.parameters, self.source = name, parameters, source

    @property
    def bytes(self):
        return 4 * self.parameters


RESNET50 = Model("ResNet-50", 25.6e6, "Keras Applications' table of models (keras.io/api/"
                 "applications): ResNet50, 25.6M parameters; He et al. 2016")


class Compute:
    """How long each worker's step takes, in real seconds: `mean` for a typical worker, spread
    across workers as `kind` says:
    - homogeneous: every worker takes `mean`;
    - heterogeneous: worker i takes mean × a factor drawn once from a log-normal of σ `sigma`
      (seeded: the same cluster for every algorithm and repeat), and the last `stragglers`
      workers (at most a quarter of them, at least one where there are two or more) take
      `straggler_factor` × mean.
    A worker's time is the same at every step (--step_delay is one number per task): what is
    emulated is slow machines, not steps that are slow now and then."""

    def __init__(self, mean, source, kind="homogeneous", sigma=0.0, straggler_factor=1.0):
        self.mean, self.source, self.kind = mean, source, kind
        self.sigma, self.straggler_factor = sigma, straggler_factor

    def stragglers(self, workers):
        if self.kind != "heterogeneous" or workers < 2:
            return 0
        return max(1, workers // 8)

    def per_worker(self, workers, seed=0):
        """Each worker's real seconds per step."""
        if self.kind == "homogeneous":
            return [self.mean] * workers
        draw = random.Random(seed)
        times = [self.mean * math.exp(draw.gauss(-self.sigma ** 2 / 2, self.sigma))
                 for _ in range(workers)]
        slow = self.stragglers(workers)
        for index in range(workers - slow, workers):
            times[index] = self.mean * self.straggler_factor
        return times


V100_RESNET50 = ("NVIDIA Deep Learning Examples, ResNet-50 v1.5 for TensorFlow: about 370 "
                 "images/s in FP32 training on one V100 16 GB, so a minibatch of 64 takes "
                 "0.17 s")


class Scenario:
    def __init__(self, name, title, model, compute, link_bits_per_second, link_source,
                 batch=64):
        self.name, self.title, self.model, self.compute = name, title, model, compute
        self.link, self.link_source, self.batch = link_bits_per_second, link_source, batch

    def emulated(self, workers, parameter_servers, scale=SCALE, seed=0):
        """The emulated settings of a cluster of this scenario: what each task gets."""
        real_times = self.compute.per_worker(workers, seed)
        return {
            "scenario": self.name, "scale": scale, "model": self.model.name,
            "real": {"parameters": self.model.parameters, "bytes": self.model.bytes,
                     "compute_seconds": real_times, "link_bits_per_second": self.link},
            "payload_mb": self.model.bytes / scale ** 2 / MIB,
            "link_bits_per_second": self.link / scale,
            "compute_seconds": [time / scale for time in real_times],
            "stragglers": self.compute.stragglers(workers),
            "parameter_servers": parameter_servers, "workers": workers}

    def describe(self):
        return {"name": self.name, "title": self.title, "model": self.model.name,
                "parameters": self.model.parameters, "model_source": self.model.source,
                "compute": {"kind": self.compute.kind, "mean_seconds": self.compute.mean,
                            "sigma": self.compute.sigma,
                            "straggler_factor": self.compute.straggler_factor,
                            "source": self.compute.source},
                "link_bits_per_second": self.link, "link_source": self.link_source,
                "batch": self.batch}


SCENARIOS = {scenario.name: scenario for scenario in [
    Scenario("datacenter", "ResNet-50 on V100 workers, 10 Gb/s links", RESNET50,
             Compute(0.17, V100_RESNET50), 10e9,
             "AWS EC2 P3 instances: a p3.2xlarge (one V100) has 'up to 10 Gbps' of network"),
    Scenario("commodity", "ResNet-50 on V100 workers, 1 Gb/s links (the ps link saturates)",
             RESNET50, Compute(0.17, V100_RESNET50), 1e9,
             "Gigabit Ethernet (IEEE 802.3ab, 1000BASE-T), the usual link of office and lab "
             "machines; DistBelief (Dean et al. 2012) ran on such commodity clusters"),
    Scenario("heterogeneous", "ResNet-50, 10 Gb/s, uneven workers and stragglers", RESNET50,
             Compute(0.17, V100_RESNET50 + "; the spread across workers and the stragglers: "
                     "the tail of slow machines that Dean and Barroso ('The Tail at Scale', "
                     "2013) and Chen et al. 2016 ('Revisiting Distributed Synchronous SGD') "
                     "describe: log-normal σ = 0.2, and one worker in eight (at least one) 3× "
                     "slower",
                     kind="heterogeneous", sigma=0.2, straggler_factor=3.0), 10e9,
             "as datacenter"),
]}
