#!/usr/bin/env bash
# A lent GPU's one call (the device tool): the fast path measured, then a paper-scale window.
#
#   bash tools/gpu_session.sh [bench|window|both] STATE VARIANT BUDGET_S
#
# It expects, carried beside the checkout: .whl/ (keras 3.15.1, namex, optree; pillow and h5py where the
# device lacks them) and runs/cifar10-q90-train.npz (python -m explorer.packed pack ... --splits train).
# What comes back under $OUT: fast_path.json (bench) and STATE's new contents under $OUT/state (window);
# `python tools/window.py collect <files_at>/state STATE` then puts them into the committed state.
set -euo pipefail
what=${1:-both}; state=${2:-paper/cifar10-vanilla}; variant=${3:-vanilla}; budget=${4:-420}
started=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
missing=()
for pair in keras:keras namex:namex optree:optree PIL:pillow h5py:h5py; do
  python -c "import ${pair%%:*}" 2>/dev/null || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
  python -m pip install -q --no-index --no-deps --find-links .whl "${missing[@]}"
fi
export KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=3 HF_HUB_OFFLINE=1
python -c "import jax, keras; print('jax', jax.__version__, jax.devices(), 'keras', keras.__version__)"
if [[ $what == bench || $what == both ]]; then
  python bench/fast_path.py --preset paper --variant spt_lsa --epochs 3 --steps 120 --json "$OUT/fast_path.json"
fi
if [[ $what == window || $what == both ]]; then
  left=$((budget - ($(date +%s) - started)))
  python tools/window.py --state "$state" --out "$OUT/state" --budget "$left" --reserve 40 \
    --preset paper --recipe paper --variant "$variant" --fast --dataset runs/cifar10-q90-train.npz
fi
