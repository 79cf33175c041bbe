#!/usr/bin/env bash
# Shared driver of the inception-score figures (Figs. 2-4 and the supplement's samples).
# usage: scripts/is_figure.sh FIGURE "DATASETS" "OPTIMIZERS" [hydra overrides...]
# For each dataset and optimizer it trains experiment=${FIGURE}_${dataset} into
# results/$FIGURE/$dataset/$optimizer (an interrupted run is resumed, a finished or diverged one
# skipped: train_or_resume of scripts/runs.sh; a run that diverges does not stop the others),
# then plots the inception-score curves (a diverged run labelled so, one that diverged before
# its first evaluation left out) and copies the last sample grid of the node-averaged model of
# each run next to the plot.
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
    mapfile -t -O "${#runs[@]}" runs < <(plotted_run "${LABEL[$opt]:-$opt}" "$dir" is_mean)
    last=$(ls "$dir"/samples/iter_*_avg.png 2>/dev/null | tail -n 1 || true)
    if [ -n "$last" ]; then cp "$last" "$out/$ds/samples_$opt.png"; fi
  done
  png="$out/${fig}_${ds}_inception_score.png"
  if [ "${#runs[@]}" -gt 0 ]; then
    "$PY" -m dadam3.plot is "${runs[@]}" --out "$png"
  else
    echo "$fig $ds: every run diverged before its first evaluation: no figure" >&2
    rm -f "$png"
  fi
done
