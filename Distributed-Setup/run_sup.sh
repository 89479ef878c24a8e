#!/usr/bin/env bash
# One ps and one worker (WORKERS=N for more) of dist_setup_sup.py (tf.train.Supervisor).
# Arguments go to the script: bash run_sup.sh --train_steps 2000
here="$(dirname "${BASH_SOURCE[0]}")"
exec bash "$here/../tools/launch" --workers "${WORKERS:-1}" "$here/dist_setup_sup.py" "$@"
