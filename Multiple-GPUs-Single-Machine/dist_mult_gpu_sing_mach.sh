#!/usr/bin/env bash
# One ps on the CPU and one worker per GPU, each worker process seeing only its own GPU.
# GPUS=N overrides the count from nvidia-smi -L; WORKERS=N the number of workers (default: one
# per GPU, or 2 on the CPU). Arguments go to the script: bash dist_mult_gpu_sing_mach.sh --train_steps 2000
here="$(dirname "${BASH_SOURCE[0]}")"
gpus="${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}"
if [ "${gpus:-0}" -eq 0 ]; then
    echo "[launch] no GPU found (nvidia-smi -L): every worker runs on the CPU (soft placement)"
fi
workers="${WORKERS:-$(( ${gpus:-0} > 0 ? ${gpus:-0} : 2 ))}"
exec bash "$here/../tools/launch" --gpus "${gpus:-0}" --workers "$workers" \
    "$here/dist_mult_gpu_sing_mach.py" "$@"
