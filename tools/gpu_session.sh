#!/usr/bin/env bash
# A lent GPU's one call (the device tool): the measurements first, then a paper-scale window.
#
#   bash tools/gpu_session.sh [bench|finetune|window|all|both] STATE VARIANT BUDGET_S
#
# Stages, each under its own time limit so that one that fails or overruns costs the others nothing:
#   bench     bench/fast_path.py on the paper preset: host float32 batches, the fast path (bfloat16, images on
#             the device, 16 steps per call) at batch 128 and at 256 (its learning rate by the linear rule),
#             then the fast path's two halves alone (at most BENCH_S seconds, default 150)
#   finetune  bench/finetune_speed.py's GPU rows: the pair on the tiny and on the 800-image zip, cold and warm,
#             on JAX (at most FINETUNE_S seconds, default 150); its CIFAR-10 test images come from
#             EXPLORER_DATA_DIR (default devdata/, carried; see below)
#   window    tools/window.py: trains STATE (a committed state folder, e.g. paper/cifar10-vanilla) with
#             --preset paper --recipe $RECIPE (default paper; paper-autoaugment: AutoAugment's policy) --fast for
#             what is left of BUDGET_S
# The window keeps JAX's compiled steps in CACHE (default runs/jax-cache). The steps a previous GPU kept (CACHE_TAR,
# default paper/compiled/jax-cache.tar, committed) are put there first when this machine is what they were compiled
# on (device kind, driver, jax and jaxlib; else they are left, said so, and the window compiles as without); the
# steps this call used come back as $OUT/jax-cache.tar: commit it as CACHE_TAR for the next GPU.
# STATE "warm" is the state the previous call's window left on this machine (KEEP, default runs/gpu-last-window:
# every window copies its state there): a second call on the still-warm machine carries on from it without the
# state travelling back and forth; it is refused when the machine is a fresh one (nothing kept).
# ("both" is bench + window, as before.) It expects, carried beside the checkout: .whl/ (keras 3.15.1, namex,
# optree) and runs/cifar10-q90-train.npz (python -m explorer.packed pack ... --splits train); for the finetune
# stage, devdata/ (python bench/finetune_speed.py --write-data devdata: the 800 test images its zips use).
# PROFILE_S=1: the window also traces a second of its steps after its first epoch (JAX's profiler), prints where
# the device's time went and sends the trace back as $OUT/profile.trace.json.gz (in the cache's place when the
# state takes 6 files); read it anywhere with `python tools/window.py profile FILE`.
# BENCH_PRESET, BENCH_STEPS, BENCH_EPOCHS, BENCH_ONLY, BENCH_ARGS (flags given after the bench's own) and
# WINDOW_ARGS (flags given after the window's own, so they win) shrink a stage for a rehearsal on the CPU
# (tests/test_window.py runs one).
# What comes back under $OUT: session.log (fast_path.json's rows in it), the window's state under $OUT/state and
# jax-cache.tar; `python tools/window.py collect <files_at>/state STATE` puts the state into the committed one.
# What travels must stay under 64 MiB: `python tools/travel.py` (docs/paper-scale.md, "A GPU session, step by
# step").
set -uo pipefail
what=${1:-all}; state=${2:-paper/cifar10-vanilla}; variant=${3:-vanilla}; budget=${4:-540}
started=$(date +%s)
OUT=${OUT:-runs/gpu-session}
KEEP=${KEEP:-runs/gpu-last-window}
CACHE=${CACHE:-runs/jax-cache}
CACHE_TAR=${CACHE_TAR:-paper/compiled/jax-cache.tar}
if [[ $state == warm ]]; then
  if [[ ! -f $KEEP/windows.jsonl ]]; then
    echo "error: no window's state kept in $KEEP: this machine is a fresh one; carry the committed state instead" >&2
    exit 3
  fi
  state=$KEEP
fi
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
elapsed() { echo $(($(date +%s) - started)); }
stage() {  # stage NAME LIMIT_S COMMAND...: runs COMMAND under LIMIT_S, says how it ended
  local name=$1 limit=$2 rc
  shift 2
  echo "== $name: at most ${limit} s, from $(elapsed) s into the session"
  timeout --kill-after=15 "$limit" "$@"
  rc=$?
  echo "== $name: exit $rc$([[ $rc == 124 ]] && echo ' (stopped at its limit)') at $(elapsed) s"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
missing=()
for pair in keras:keras namex:namex optree:optree PIL:pillow h5py:h5py; do
  python -c "import ${pair%%:*}" 2>/dev/null || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
  python -m pip install -q --no-index --no-deps --find-links .whl "${missing[@]}"
fi
export KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=3 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export EXPLORER_DATA_DIR=${EXPLORER_DATA_DIR:-$PWD/devdata}
python -c "import jax, keras; print('jax', jax.__version__, jax.devices(), 'keras', keras.__version__)"
if [[ $what == bench || $what == both || $what == all ]]; then
  rows=$(mktemp --suffix=.json)  # a fresh file: a bench that fails before its first row prints nothing stale
  stage bench "${BENCH_S:-150}" python bench/fast_path.py --preset "${BENCH_PRESET:-paper}" --variant spt_lsa \
    --epochs "${BENCH_EPOCHS:-2}" --steps "${BENCH_STEPS:-256}" --json "$rows" \
    --only "${BENCH_ONLY:-host float32,device bf16 x16,device bf16 x16 batch 256,device float32,device bf16}" \
    ${BENCH_ARGS:-}
  [[ -s $rows ]] && cat "$rows" && echo  # into the log: at most 8 files come back, the state takes 6
fi
if [[ $what == finetune || $what == all ]]; then
  stage finetune "${FINETUNE_S:-150}" python bench/finetune_speed.py --backends jax --skip-reference --no-host
fi
if [[ $what == window || $what == both || $what == all ]]; then
  if [[ -f $CACHE_TAR ]]; then
    python tools/window.py cache-in "$CACHE_TAR" "$CACHE" || echo "(the window compiles anew)"
  fi
  left=$((budget - $(elapsed)))
  stage window $((left + 30)) python tools/window.py --state "$state" --out "$OUT/state" --budget "$left" \
    --reserve "${RESERVE_S:-40}" --preset paper --recipe "${RECIPE:-paper}" --variant "$variant" --fast \
    --dataset runs/cifar10-q90-train.npz --compile-cache "$CACHE" \
    ${PROFILE_S:+--profile "$OUT/profile.trace.json.gz" --profile-s "$PROFILE_S"} ${WINDOW_ARGS:-}
  if [[ -f $OUT/state/windows.jsonl ]]; then  # for a next call on this machine while it is warm (STATE "warm")
    rm -rf "$KEEP.tmp" && cp -r "$OUT/state" "$KEEP.tmp" && rm -rf "$KEEP" && mv "$KEEP.tmp" "$KEEP"
  fi
  returned=$(find "$OUT" -type f | wc -l)  # at most 8 come back: the state takes at most 6, the log 1
  if [[ -d $CACHE ]] && ((returned < 8)); then
    python tools/window.py cache-out "$CACHE" "$OUT/jax-cache.tar" --since "$started"
  elif [[ -d $CACHE ]]; then
    echo "the compiled steps stay here: $returned files already come back (the profile's trace among them)"
  fi
fi
echo "== session: $(elapsed) s of $budget"
