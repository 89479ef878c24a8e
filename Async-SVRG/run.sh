#!/usr/bin/env bash
# One ps and two workers (WORKERS=N for more) of Async-SVRG.py on free localhost ports.
# Arguments go to the script: bash run.sh --epoch_steps 100
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../tools/launch" --workers "${WORKERS:-2}" "$here/Async-SVRG.py" "$@"
