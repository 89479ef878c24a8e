#!/usr/bin/env bash
# One ps and two workers (WORKERS=N for more) of Staleness-Aware-SGD.py on free localhost ports.
# Arguments go to the script: WORKERS=4 bash run.sh --learning_rate 0.2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../tools/launch" --workers "${WORKERS:-2}" "$here/Staleness-Aware-SGD.py" "$@"
