#!/usr/bin/env bash
# One ps and two workers (WORKERS=N for more) of AEASGD.py on free localhost ports.
# Arguments go to the script: bash run.sh --window 8 --rho 2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../tools/launch" --workers "${WORKERS:-2}" "$here/AEASGD.py" "$@"
