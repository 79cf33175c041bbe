#!/usr/bin/env bash
# Beyond the paper: the Fig. 3 methods on Fashion-MNIST (experiment=fmnist_fig3, seed 0) at
# step sizes 5e-5 and 8e-4 besides the preset's 2e-4 (whose seed-0 runs are those of
# scripts/fmnist_fig3.sh, not trained twice), so a reader can tell whether a ranking is an
# artefact of the one shared step size. Writes results/fmnist/lr_sweep/lr<lr>/ and
# results/fmnist/lr_sweep/summary.md (all three step sizes).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${FMNIST_OUT:-results/fmnist}
for lr in ${LRS:-5e-5 8e-4}; do
  bash scripts/fmnist_figure.sh "lr_sweep/lr$lr" fmnist_fig3 "dadam3 cadam3 dosg cosg" 0 "optimizer.lr=$lr" "$@"
done
runs=()
for opt in dadam3 cadam3 dosg cosg; do
  for lr in ${LRS:-5e-5 8e-4}; do runs+=(--run "$opt, lr $lr=$out/lr_sweep/lr$lr/$opt/seed0"); done
  if [ -f "$out/fig3/$opt/seed0/metrics.jsonl" ]; then runs+=(--run "$opt, lr 2e-4=$out/fig3/$opt/seed0"); fi
done
"${PYTHON:-python}" -m dadam3.plot summary "${runs[@]}" --out "$out/lr_sweep/summary.md"
