#!/usr/bin/env bash
# The small-data study's pilot (study/README.md, "The pilot"): the keras.io recipe with a long schedule at
# the smallest and the largest size, vanilla and SPT+LSA, validation on the same 5,000 images, one
# TensorFlow thread per run and two runs side by side. A finished run's card lands in study/pilot/ and is
# not run again; an unfinished one resumes from its backup in study/pilot/backup-* (committed as it goes).
#   bash study/pilot.sh [DATA_DIR]          (default ../shared/data)
set -uo pipefail
cd "$(dirname "$0")/.."
DATA="${1:-../shared/data}"
PILOT=study/pilot
run() {  # size variant epochs val_every
  local name="pilot-$1-$2"
  [ -f "$PILOT/$name.json" ] && return 0
  python -m explorer.train --preset cifar-small --variant "$2" --dataset cifar10 --data-dir "$DATA" \
    --balanced-subset "$1" --split-seed 0 --seed 0 --epochs "$3" --val-every "$4" --threads 1 --verbose 2 \
    --out runs/pilot --name "$name" --backup "$PILOT/backup-$1-$2" >> "runs/pilot/$1-$2.log" 2>&1 \
    && cp "runs/pilot/$name/explorer.json" "$PILOT/$name.json"
}
mkdir -p runs/pilot "$PILOT"
( run 1000 spt_lsa 400 10; run 20000 spt_lsa 50 1 ) &
( run 1000 vanilla 400 10; run 20000 vanilla 50 1 ) &
wait
