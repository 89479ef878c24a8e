#!/usr/bin/env bash
# ssgd.py, one learning rate per worker: one ps and two workers (WORKERS=N for more), free ports.
# Arguments go to the script: bash run.sh --learning_rates 0.15,0.05
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../tools/launch" --workers "${WORKERS:-2}" "$here/ssgd.py" "$@"
