#!/usr/bin/env bash
# One runner (one torchrun agent) per task of a SLURM job step: appends this task's node rank
# (SLURM_PROCID; with one task per node it equals SLURM_NODEID, and unlike it stays distinct
# when a test packs two tasks onto one host) and the job's first host as the rendezvous master,
# by the address SLURM itself reaches it on (its NodeAddr; the node's name where none is set):
# a name can resolve to loopback on that host itself (127.0.1.1 in Debian's /etc/hosts), and
# node 0 would then bind gloo and NCCL to `lo`. A partitioned run (--ip-config slurm) reads every
# node's NodeAddr the same way (runners/launch/slurm.py) for DGL's ip_config, and checks that node 0's
# is this master address.
# exec: the runner itself must receive SLURM's SIGTERM at a time limit or scancel.
#   srun --ntasks-per-node=1 scripts/slurm_node.sh python -m runners.run ... --nnodes N --master-port P
set -euo pipefail
: "${SLURM_PROCID:?scripts/slurm_node.sh runs inside a SLURM job step (srun)}"
: "${SLURM_JOB_NODELIST:?scripts/slurm_node.sh runs inside a SLURM job step (srun)}"
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
addr=$(scontrol show node "$first" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p' || true)
exec "$@" --node-rank "$SLURM_PROCID" --master-addr "${addr:-$first}"
