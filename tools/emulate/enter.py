"""python tools/emulate/enter.py NAMESPACE SCRIPT [ARGS...]: run an example inside a network
namespace, as `ip netns exec NAMESPACE python SCRIPT ARGS` would (less its remount of /sys,
which no example reads): the process joins the namespace, then runs the script as `python
SCRIPT ARGS` does. Being itself `python SCRIPT ...`, it can be forked from an interpreter that
has imported TensorFlow already (the tests' zygote does that), and each emulated task then
starts in a fraction of the time.

It imports nothing of tools/emulate (network.py imports enter_namespace from here), so that
the example's process holds nothing but the example."""
import ctypes
import os
import runpy
import sys

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/var/run/netns"  # where `ip netns add` keeps the namespaces' handles


def enter_namespace(namespace):
    """Move the calling thread (setns is per thread) into the network namespace: the sockets
    it opens and the /proc/thread-self/net it reads are then the namespace's. In a process of
    one thread, as here before the script starts, the whole process moves."""
    fd = os.open(os.path.join(NETNS_DIR, namespace), os.O_RDONLY)
    try:
        if ctypes.CDLL("libc.so.6", use_errno=True).setns(fd, CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), "setns %s" % namespace)
    finally:
        os.close(fd)


def main():
    namespace, script = sys.argv[1], sys.argv[2]
    enter_namespace(namespace)
    sys.argv = sys.argv[2:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
