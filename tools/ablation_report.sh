#!/usr/bin/env bash
# The 2x2 ablation's report once tools/train_ablation.sh has finished both variants: evaluates the four
# checkpoints on every test image (single view and --flip, locality over 256 images; the metrics go into
# each card), then measures evidence and shift robustness for all four. Writes ablation/RESULTS.md: the
# side-by-side table, the 2x2 section (also in docs/results.md) and the evidence tables.
#
#     bash tools/ablation_report.sh [DATA_DIR]
#
# A dry run on other checkpoints and fewer images (nothing stored in the cards):
#     EXPLORER_CHECKPOINTS=/tmp/four ABLATION_LIMIT=500 ABLATION_OUT=/tmp/RESULTS.md bash tools/ablation_report.sh
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-${EXPLORER_DATA_DIR:-../shared/data}}
root=${EXPLORER_CHECKPOINTS:-checkpoints}
out=${ABLATION_OUT:-ablation/RESULTS.md}
limit=()
if [ -n "${ABLATION_LIMIT:-}" ]; then limit=(--limit "$ABLATION_LIMIT"); fi
four=("$root/cifar10-vanilla" "$root/cifar10-lsa" "$root/cifar10-spt" "$root/cifar10-spt_lsa")
for c in "${four[@]}"; do
  [ -d "$c" ] || { echo "error: $c is missing: finish tools/train_ablation.sh spt|lsa first" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python -m explorer.evaluate "${four[@]}" --data-dir "$data" --flip --locality 256 --markdown --ablation \
  ${limit[@]+"${limit[@]}"} > "$tmp/eval"
EXPLORER_DATA_DIR="$data" python bench/evidence_summary.py "${four[@]}" ${limit[@]+"${limit[@]}"} > "$tmp/evidence"
{
  echo "# The 2x2 ablation: results"
  echo
  echo "Written by \`tools/ablation_report.sh\` on $(date -u +%F)${ABLATION_LIMIT:+ over the first $ABLATION_LIMIT test images (a dry run)}."
  echo
  echo '```'
  awk 'NF == 0 {exit} {print}' "$tmp/eval"   # the side-by-side table: its first paragraph
  echo '```'
  echo
  awk 'found {print} NF == 0 {found = 1}' "$tmp/eval"   # the Markdown results table and the 2x2 section
  echo
  echo "## Evidence and shift robustness"
  echo
  cat "$tmp/evidence"
} > "$out"
echo "wrote $out"
