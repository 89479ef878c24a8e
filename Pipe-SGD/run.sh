#!/usr/bin/env bash
# Pipe-SGD.py: two workers (WORKERS=N for more) and no ps, on free localhost ports.
# Arguments go to the script: bash run.sh --train_steps 2000
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../tools/launch" --workers "${WORKERS:-2}" --ps 0 "$here/Pipe-SGD.py" "$@"
