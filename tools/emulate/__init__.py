"""An emulated cluster on one machine: any example with N workers as real TensorFlow tasks, each
in a network namespace of its own behind a shaped link, each worker with the compute time of a
real accelerator, θ and g carrying the bytes of a real model, all scaled by one factor.

    python -m tools.emulate --scenario datacenter --workers 4 Hogwild/Hogwild.py --train_steps 400
    python -m tools.emulate --capacity --scenario datacenter Hogwild/Hogwild.py
    python -m tools.emulate --list
    python -m tools.compare --emulate datacenter,commodity --workers 2,4   # the comparison

Needs root (network namespaces, tc). See docs/emulation.md. The modules: scenarios (the real
settings, their sources, the scale factor), network (namespaces, links, shaping), monitor
(what the links and CPUs did), enter (how a task joins its namespace), cluster (an example's
tasks on the emulated network, and what was measured), capacity (the largest cluster this
machine holds), cli.
"""
from .cluster import EmulatedCluster, TimedCluster, describe_measured, emulation
from .network import NetworkError, can_make_namespaces
from .scenarios import SCALE, SCENARIOS

__all__ = ["EmulatedCluster", "TimedCluster", "describe_measured", "emulation", "NetworkError",
           "can_make_namespaces", "SCALE", "SCENARIOS"]
