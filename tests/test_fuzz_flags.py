"""No command line and no TF_CONFIG makes an example crash with a traceback: each either parses
or ends with exit code 2 and one line (fuzzed with hypothesis)."""
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import ROOT, load_example

import shared_helpers

DISTRIBUTED = [path for path in shared_helpers.example_scripts()
               if "def example_parser" in open(path).read()]
FLAGS = ["--job_name", "--task_index", "--ps_hosts", "--worker_hosts", "--timeout",
         "--train_steps", "--batch_size", "--learning_rate", "--seed", "--log_every",
         "--checkpoint_every", "--step_delay", "--window", "--replicas_to_aggregate",
         "--learning_rates", "--rho", "--momentum"]
host = st.one_of(st.sampled_from(["localhost", "127.0.0.1", "", "::1", "h", "[::1]"]),
                 st.text(max_size=8))
port = st.one_of(st.integers(-5, 70000).map(str), st.text(max_size=5))
host_port = st.builds(lambda h, p, sep: h + sep + p, host, port, st.sampled_from([":", "", "::"]))
host_list = st.lists(host_port, max_size=4).map(",".join)
value = st.one_of(st.integers(-3, 5).map(str), st.floats(allow_nan=True).map(str),
                  st.sampled_from(["ps", "worker", "chief", "0.1,0.2", "", "nan", "-0"]),
                  host_list, st.text(max_size=10))
argv = st.lists(st.tuples(st.sampled_from(FLAGS), value), max_size=6).map(
    lambda pairs: [item for pair in pairs for item in pair])
json_value = st.recursive(st.none() | st.booleans() | st.integers(-3, 5) | st.text(max_size=6)
                          | host_port, lambda children: st.lists(children, max_size=3)
                          | st.dictionaries(st.text(max_size=6), children, max_size=3),
                          max_leaves=8)
tf_config = st.one_of(
    st.text(max_size=20).filter(lambda text: "\x00" not in text),  # an environment has no NUL
    json_value.map(json.dumps),
    st.builds(lambda ps, workers, job, index: json.dumps(
        {"cluster": {"ps": ps, "worker": workers}, "task": {"type": job, "index": index}}),
        st.lists(host_port, max_size=2), st.lists(host_port, max_size=3),
        st.sampled_from(["ps", "worker", "chief", "evaluator", 3]),
        st.one_of(st.integers(-2, 4), st.text(max_size=3))))


@pytest.mark.parametrize("path", DISTRIBUTED, ids=lambda path: os.path.relpath(path, ROOT))
def test_any_input_parses_or_exits_2_with_one_line(path, capsys, monkeypatch):
    module = load_example(os.path.relpath(path, ROOT))

    @settings(max_examples=25, deadline=None,
              # (the health checks judge the generator, not the example: a run that drew
              # many large TF_CONFIG values is not a failure of parse_flags)
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.data_too_large, HealthCheck.too_slow])
    @given(argv=argv, tf_config=st.one_of(st.none(), tf_config))
    def check(argv, tf_config):
        if tf_config is None:
            monkeypatch.delenv("TF_CONFIG", raising=False)
        else:
            monkeypatch.setenv("TF_CONFIG", tf_config)
        capsys.readouterr()
        try:
            module.parse_flags(argv)
        except SystemExit as exit_:
            error = capsys.readouterr().err
            assert exit_.code == 2, (argv, tf_config, error)
            assert len(error.strip().splitlines()) == 1, (argv, tf_config, error)

    check()
