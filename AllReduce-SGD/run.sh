#!/usr/bin/env bash
# AllReduce-SGD.py: two workers (WORKERS=N for more) and no ps, on free localhost ports.
# Arguments go to the script: bash run.sh --scale_learning_rate --warmup_steps 100
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../tools/launch" --workers "${WORKERS:-2}" --ps 0 "$here/AllReduce-SGD.py" "$@"
