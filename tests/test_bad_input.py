"""Bad flags and cluster specs end with one line naming the problem and exit code 2, before any
server starts, in every distributed example."""
import json
import os
import socket
import sys

import pytest

from helpers import ROOT, free_ports, has_parameter_servers, load_example, rejected, run_script

import shared_helpers

CLUSTER_SCRIPTS = [path for path in shared_helpers.example_scripts()
                   if "def example_parser" in open(path).read()]
DISTRIBUTED = [path for path in CLUSTER_SCRIPTS if has_parameter_servers(path)]
# Scripts without a ps (PARAMETER_SERVERS = 0: all-reduce, gossip, AD-PSGD): a cluster of
# workers only, and what that makes bad input; their own flags are in their tests.
WORKERS_ONLY = [path for path in CLUSTER_SCRIPTS if not has_parameter_servers(path)]
PS, WORKER0, WORKER1 = ("localhost:%d" % port for port in free_ports(3))
CLUSTER = ["--ps_hosts", PS, "--worker_hosts", "%s,%s" % (WORKER0, WORKER1)]

BAD_FLAGS = {
    "unknown job name": (["--job_name", "chief"] + CLUSTER, "invalid choice"),
    "task index out of range": (["--job_name", "worker", "--task_index", "2"] + CLUSTER,
                                "out of range"),
    "negative task index": (["--job_name", "ps", "--task_index", "-1"] + CLUSTER,
                            "out of range"),
    "host without port": (["--ps_hosts", "localhost", "--worker_hosts", WORKER0],
                          "not host:port"),
    "port not a number": (["--ps_hosts", "localhost:http", "--worker_hosts", WORKER0],
                          "not host:port"),
    "port too large": (["--ps_hosts", PS, "--worker_hosts", "localhost:70000"],
                       "not host:port"),
    "empty host": (["--ps_hosts", ":2222", "--worker_hosts", WORKER0], "not host:port"),
    "zero workers": (["--ps_hosts", PS, "--worker_hosts", ""], "at least one"),
    "duplicate ports": (["--ps_hosts", PS, "--worker_hosts", PS], "more than one task"),
    "zero steps": (["--train_steps", "0"] + CLUSTER, "--train_steps"),
    "negative steps": (["--train_steps", "-5"] + CLUSTER, "--train_steps"),
    "zero batch": (["--batch_size", "0"] + CLUSTER, "--batch_size"),
    "negative learning rate": (["--learning_rate", "-0.1"] + CLUSTER, "--learning_rate"),
    "zero timeout": (["--timeout", "0"] + CLUSTER, "--timeout"),
    "unknown flag": (["--no_such_flag"] + CLUSTER, "unrecognized"),
}

BAD_TF_CONFIG = {
    "not JSON": ("{cluster", "TF_CONFIG"),
    "no task": (json.dumps({"cluster": {"ps": [PS], "worker": [WORKER0]}}), "TF_CONFIG"),
    "task index out of range": (json.dumps({"cluster": {"ps": [PS], "worker": [WORKER0]},
                                            "task": {"type": "worker", "index": 3}}),
                                "out of range"),
    "task type not in cluster": (json.dumps({"cluster": {"ps": [PS], "worker": [WORKER0]},
                                             "task": {"type": "evaluator", "index": 0}}),
                                 "unknown job name"),
    "a chief job": (json.dumps({"cluster": {"chief": [WORKER1], "ps": [PS], "worker": [WORKER0]},
                                "task": {"type": "worker", "index": 0}}), "chief"),
    "hosts not a list": (json.dumps({"cluster": {"ps": PS, "worker": 7},
                                     "task": {"type": "ps", "index": 0}}), "TF_CONFIG"),
}


@pytest.fixture(params=DISTRIBUTED, ids=lambda path: os.path.relpath(path, ROOT))
def module(request):
    return load_example(os.path.relpath(request.param, ROOT))


@pytest.mark.parametrize("case", sorted(BAD_FLAGS))
def test_bad_flags_get_one_line_and_exit_2(module, case, capsys):
    argv, expected = BAD_FLAGS[case]
    assert expected in rejected(module, argv, capsys)


@pytest.mark.parametrize("case", sorted(BAD_TF_CONFIG))
def test_bad_tf_config_gets_one_line_and_exit_2(module, case, capsys, monkeypatch):
    text, expected = BAD_TF_CONFIG[case]
    monkeypatch.setenv("TF_CONFIG", text)
    assert expected in rejected(module, [], capsys)


def test_a_port_in_use_is_named(module, capsys):
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        error = rejected(module, ["--job_name", "ps", "--ps_hosts", "localhost:%d" % port,
                                  "--worker_hosts", WORKER0], capsys)
    assert "port %d is already in use" % port in error


def test_flags_win_over_tf_config(module, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "not even JSON")
    args = module.parse_flags(["--job_name", "worker", "--task_index", "1"] + CLUSTER)
    assert args.cluster == {"ps": [PS], "worker": [WORKER0, WORKER1]}
    assert (args.job_name, args.task_index) == ("worker", 1)


WORKERS = ["--worker_hosts", "%s,%s" % (WORKER0, WORKER1)]
BAD_FLAGS_WITHOUT_A_PS = {
    "a ps given": (["--ps_hosts", PS] + WORKERS, "no parameter server"),
    "the ps job": (["--job_name", "ps", "--task_index", "0"] + WORKERS, "no parameter server"),
    "task index out of range": (["--task_index", "2"] + WORKERS, "out of range"),
    "zero workers": (["--worker_hosts", ""], "at least one"),
    "zero steps": (["--train_steps", "0"] + WORKERS, "--train_steps"),
    "unknown flag": (["--no_such_flag"] + WORKERS, "unrecognized"),
}


@pytest.mark.parametrize("case", sorted(BAD_FLAGS_WITHOUT_A_PS))
@pytest.mark.parametrize("path", WORKERS_ONLY, ids=lambda path: os.path.relpath(path, ROOT))
def test_a_script_without_a_ps_refuses_a_ps_and_bad_flags(path, case, capsys):
    argv, expected = BAD_FLAGS_WITHOUT_A_PS[case]
    module = load_example(os.path.relpath(path, ROOT))
    assert expected in rejected(module, argv, capsys)


def test_the_real_command_line_exits_2_without_a_traceback():
    code, text = run_script([sys.executable, DISTRIBUTED[0], "--job_name", "worker",
                             "--task_index", "7"] + CLUSTER, timeout=60)
    assert code == 2
    assert text.strip().splitlines()[-1].endswith("task index 7 is out of range: there are 2 "
                                                   "worker task(s) (see --help)")
    assert "Traceback" not in text
