#!/usr/bin/env bash
# Set up the project's environment, then run every example, or the tests.
#
#   bash setup.sh             install into .venv (Python 3.7 + TensorFlow 1.15.5, and Jupyter for
#                             the notebooks), then run every example briefly and print a table of
#                             what each reached
#   bash setup.sh test        install the same plus the test tools, then run the whole test suite;
#                             then its compatibility part (the tests marked tf2) on TensorFlow 2.x
#   bash setup.sh --tf2 ...   the same with TensorFlow 2.x (tf.compat.v1) on python3, in .venv-tf2
#
# Both are idempotent: a second run installs nothing unless requirements/ changed.
# Extra arguments go to the benchmark or to pytest (bash setup.sh test -k launcher).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$root"

flavour=tf1
if [ "${1:-}" = "--tf2" ]; then flavour=tf2; shift; fi
mode=run
if [ "${1:-}" = "test" ]; then mode=test; shift; fi

find_python37() {
    local candidate candidates=("${PYTHON37:-}" python3.7)
    candidates+=("${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.7*/bin/python /usr/local/bin/python3.7 /usr/bin/python3.7)
    for candidate in "${candidates[@]}"; do
        [ -n "$candidate" ] || continue
        # The pyenv shim exists but fails unless 3.7 is selected, so run it rather than trust it.
        if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 7)' >/dev/null 2>&1; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

if [ "$flavour" = tf1 ]; then
    venv=.venv
    if ! base_python="$(find_python37)"; then
        echo "setup: Python 3.7 was not found, and TensorFlow 1.15.5 needs it." >&2
        echo "  Get it with 'pyenv install 3.7.16' (or your package manager), or name it:" >&2
        echo "  PYTHON37=/path/to/python3.7 bash setup.sh ${mode/run/}" >&2
        echo "  Or take the TensorFlow 2.x route (tf.compat.v1, same scripts) on $(python3 --version 2>&1):" >&2
        echo "  bash setup.sh --tf2 ${mode/run/}" >&2
        exit 1
    fi
else
    venv=.venv-tf2
    base_python="${PYTHON3:-python3}"
fi

# The whole suite (bash setup.sh test) ends with its TensorFlow 2.x part. .venv-tf2 installs
# meanwhile, in the background, from the start: pip keeps about one core busy, so each install
# takes the core the other leaves idle. It runs in a process group of its own (set -m: job
# control; macOS has no setsid), which ends with this script.
if [ "$flavour" = tf1 ] && [ "$mode" = test ] && [ $# -eq 0 ]; then
    install_log="$(mktemp "${TMPDIR:-/tmp}/setup-tf2-install.XXXXXX")"
    set -m
    SETUP_INSTALL_ONLY=1 bash "$root/setup.sh" --tf2 test >"$install_log" 2>&1 &
    set +m
    installing=$!
    trap 'kill -- -"$installing" 2>/dev/null; rm -f "$install_log"' EXIT
fi

requirements=(requirements/$flavour.txt requirements/jupyter.txt)
[ "$mode" = test ] && requirements+=(requirements/test.txt)
stamp="$venv/.installed-$(cat "${requirements[@]}" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    echo "setup: installing ${requirements[*]} into $venv with $("$base_python" --version 2>&1)"
    [ -x "$venv/bin/python" ] || "$base_python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "pip<24"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]/#/-r}"
    touch "$stamp"
fi
[ -z "${SETUP_INSTALL_ONLY:-}" ] || exit 0  # (how the TensorFlow 2.x install runs below)

if [ "$mode" = test ]; then
    # Many tests spend much of their time waiting (for a --timeout, for a restarted task), so
    # they run in several processes (pytest-xdist), two per core and two more, at most 8; on
    # TensorFlow 2.x two per core, as a process and its zygote take about 16 s of CPU to start
    # there (7 s on 1.15). TEST_JOBS=N sets how many (0: all in this one). A module
    # with a module-wide fixture (one Slurm, one comparison run) stays in one (--dist loadgroup,
    # xdist_group marks). Each process gives its clusters ports from a range of its own
    # (tests/conftest.py). --durations: the slowest tests, so that every run shows where the
    # suite's time goes.
    jobs=$(( 2 * $(nproc) ))
    [ "$flavour" = tf2 ] || jobs=$(( jobs + 2 ))
    jobs="${TEST_JOBS:-$(( jobs > 8 ? 8 : jobs ))}"
    pytest=("$venv/bin/python" -m pytest tests -n "$jobs" --dist loadgroup --durations=25)
    if [ "$flavour" = tf2 ] || [ $# -gt 0 ]; then
        exec "${pytest[@]}" "$@"
    fi
    # Every test on the reference platform, then the same scripts on TensorFlow 2.x, which is
    # the route for people without Python 3.7 (see tests/conftest.py for what -m tf2 selects).
    # A first part that fails or is interrupted ends it all (the EXIT trap ends the install).
    "${pytest[@]}"
    if ! wait "$installing"; then
        cat "$install_log" >&2
        echo "setup: installing .venv-tf2 failed (above); the TensorFlow 2.x part did not run" >&2
        exit 1
    fi
    trap - EXIT
    cat "$install_log"
    rm -f "$install_log"
    echo "setup: TensorFlow 2.x compatibility run: bash setup.sh --tf2 test -m tf2"
    exec bash "$root/setup.sh" --tf2 test -m tf2
fi
exec "$venv/bin/python" tools/benchmark.py "$@"
