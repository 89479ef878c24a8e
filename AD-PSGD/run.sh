#!/usr/bin/env bash
# AD-PSGD.py: two workers (WORKERS=N for more) and no ps, on free localhost ports.
# Arguments go to the script: bash run.sh --learning_rate 0.05
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../tools/launch" --workers "${WORKERS:-2}" --ps 0 "$here/AD-PSGD.py" "$@"
