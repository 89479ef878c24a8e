#!/usr/bin/env bash
# Sync-Switch.py: one ps and two workers (WORKERS=N for more) on free localhost ports.
# Arguments go to the script: bash run.sh --switch_at 0.5
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../tools/launch" --workers "${WORKERS:-2}" "$here/Sync-Switch.py" "$@"
