#!/usr/bin/env bash
# Shared driver of the inception-score figures (Figs. 2-4 and the supplement's samples).
# usage: scripts/is_figure.sh FIGURE "DATASETS" "OPTIMIZERS" [hydra overrides...]
# For each dataset and optimizer it trains experiment=${FIGURE}_${dataset} into
# results/$FIGURE/$dataset/$optimizer (an interrupted run is resumed, a finished one
# skipped: train_or_resume of scripts/runs.sh), then plots the inception-score curves and
# copies the last sample grid of the node-averaged model of each run next to the plot.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
source scripts/runs.sh
fig=$1; datasets=$2; optimizers=$3; shift 3
out=${FIG_OUT:-results}/$fig
for ds in $datasets; do
  runs=()
  for opt in $optimizers; do
    dir="$out/$ds/$opt"
    train_or_resume "$dir" "experiment=${fig}_$ds" "optimizer=$opt" "$@"
    runs+=(--run "${LABEL[$opt]:-$opt}=$dir")
    last=$(ls "$dir"/samples/iter_*_avg.png | tail -n 1)
    cp "$last" "$out/$ds/samples_$opt.png"
  done
  "$PY" -m dadam3.plot is "${runs[@]}" --out "$out/${fig}_${ds}_inception_score.png"
done
