#!/usr/bin/env bash
# Local-SGD.py: one ps and two workers (WORKERS=N for more) on free localhost ports.
# Arguments go to the script: bash run.sh --non_iid
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../tools/launch" --workers "${WORKERS:-2}" "$here/Local-SGD.py" "$@"
