#!/usr/bin/env bash
# ssgd.py: one ps and two workers (WORKERS=N for more) on free localhost ports.
# Arguments go to the script: WORKERS=3 bash run.sh --replicas_to_aggregate 2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../tools/launch" --workers "${WORKERS:-2}" "$here/ssgd.py" "$@"
