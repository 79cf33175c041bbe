#!/usr/bin/env bash
# Shared driver of the inception-score figures (Figs. 2-4 and the supplement's samples).
# usage: scripts/is_figure.sh FIGURE "DATASETS" "OPTIMIZERS" [hydra overrides...]
# For each dataset and optimizer it trains experiment=${FIGURE}_${dataset} into
# results/$FIGURE/$dataset/$optimizer (an interrupted run is resumed, a finished one
# skipped), then plots the inception-score curves and copies the last sample grid of the
# node-averaged model of each run next to the plot.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
fig=$1; datasets=$2; optimizers=$3; shift 3
out=${FIG_OUT:-results}/$fig
declare -A label=([adam3]=Adam3 [oadagrad]=OAdagrad [dadam3]=Dadam3 [cadam3]=Cadam3 [dosg]=DOSG [cosg]=COSG)
for ds in $datasets; do
  runs=()
  for opt in $optimizers; do
    dir="$out/$ds/$opt"
    if tail -n 1 "$dir/metrics.jsonl" 2>/dev/null | grep -q '"status": "finished"'; then   # the last record decides
      echo "$dir: finished, skipped"
    elif [ -f "$dir/checkpoints/last.pt" ]; then
      "$PY" -m dadam3.train "experiment=${fig}_$ds" "optimizer=$opt" "resume=$dir" "$@" hydra.run.dir="$dir"
    else
      "$PY" -m dadam3.train "experiment=${fig}_$ds" "optimizer=$opt" "$@" hydra.run.dir="$dir"
    fi
    runs+=(--run "${label[$opt]:-$opt}=$dir")
    last=$(ls "$dir"/samples/iter_*_avg.png | tail -n 1)
    cp "$last" "$out/$ds/samples_$opt.png"
  done
  "$PY" -m dadam3.plot is "${runs[@]}" --out "$out/${fig}_${ds}_inception_score.png"
done
