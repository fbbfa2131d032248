#!/usr/bin/env bash
# The 2x2 ablation's other two models, cifar10-spt and cifar10-lsa, trained exactly as the shipped pair was:
# docs/train.md's four stages (seed 0, the same split, one tau per layer, batch mixing in stage 4), one
# TensorFlow thread each. Every stage keeps a backup after each epoch (explorer.training.backup) and resumes from it
# when started again; a finished stage is skipped. Run both variants side by side:
#
#     bash tools/train_ablation.sh spt > runs/spt.log 2>&1 &
#     bash tools/train_ablation.sh lsa > runs/lsa.log 2>&1 &
#
# Stages 1-3 are written to ablation/ (the next stage's base), the last to checkpoints/cifar10-<variant>;
# commit ablation/ to carry a finished stage or a running stage's backup to another machine.
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:?usage: tools/train_ablation.sh spt|lsa [DATA_DIR]}
data=${2:-${EXPLORER_DATA_DIR:-../shared/data}}
common=(--dataset cifar10 --data-dir "$data" --threads 1 --verbose 2)

stage() {  # stage OUT NAME ARGS...: trains OUT/NAME unless it exists, resuming from ablation/backup/NAME
  local out=$1 name=$2
  shift 2
  if [ -d "$out/$name" ]; then
    echo "$out/$name exists: stage done"
    return 0
  fi
  python -m explorer.train "$@" "${common[@]}" --out "$out" --name "$name" --backup "ablation/backup/$name"
}

stage ablation "cifar10-$variant-60ep" --preset cifar-small --variant "$variant" --epochs 60
stage ablation "cifar10-$variant-110ep" --base "ablation/cifar10-$variant-60ep" --continue --epochs 50 \
    --lr 5e-4 --warmup 0.05
stage ablation "cifar10-$variant-160ep" --base "ablation/cifar10-$variant-110ep" --continue --epochs 50 \
    --lr 5e-4 --warmup 0.05
stage checkpoints "cifar10-$variant" --base "ablation/cifar10-$variant-160ep" --continue --epochs 40 \
    --lr 5e-4 --warmup 0.05 --weight-decay 0.05 --cutmix 1 --mixup 0.2 --mix-prob 0.5
