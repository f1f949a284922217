#!/usr/bin/env bash
# One runner (one torchrun agent) per task of a SLURM job step: appends this task's node rank
# (SLURM_PROCID; with one task per node it equals SLURM_NODEID, and unlike it stays distinct
# when a test packs two tasks onto one host) and the job's first host as the rendezvous master.
# exec: the runner itself must receive SLURM's SIGTERM at a time limit or scancel.
#   srun --ntasks-per-node=1 scripts/slurm_node.sh python -m runners.run ... --nnodes N --master-port P
set -euo pipefail
: "${SLURM_PROCID:?scripts/slurm_node.sh runs inside a SLURM job step (srun)}"
: "${SLURM_JOB_NODELIST:?scripts/slurm_node.sh runs inside a SLURM job step (srun)}"
master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
exec "$@" --node-rank "$SLURM_PROCID" --master-addr "$master"
