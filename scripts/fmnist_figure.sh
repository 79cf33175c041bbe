#!/usr/bin/env bash
# Shared driver of the Fashion-MNIST experiments (scripts/fmnist_fig2.sh, fmnist_fig3.sh,
# fmnist_lr_sweep.sh).
# usage: scripts/fmnist_figure.sh NAME EXPERIMENT "OPTIMIZERS" "SEEDS" [hydra overrides...]
# Trains experiment=EXPERIMENT for every seed and optimizer into
# ${FMNIST_OUT:-results/fmnist}/NAME/<optimizer>/seed<seed>/ (seed by seed, so a partial run
# already covers every method; an interrupted run is resumed, a finished one skipped: the last
# record of its metrics.jsonl decides), then draws IS and FID against iteration (node mean
# solid, node-averaged model dashed, mean ± std band over seeds), copies the last sample grid
# of each method's averaged model (seed 0) next to it and writes summary.md (final IS / FID /
# KID, mean ± std over seeds). SMOKE=1: seconds-long runs on the committed 1000-image subset.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
source scripts/runs.sh
name=$1; experiment=$2; optimizers=$3; seeds=$4; shift 4
out=${FMNIST_OUT:-results/fmnist}/$name
smoke=()
if [ "${SMOKE:-0}" = 1 ]; then
  smoke=(iterations=4 model.width=0.03125 batch_size=4 log_every=2 sample_every=2 checkpoint_every=2
         metrics.every=2 metrics.samples=20 metrics.batch_size=20 dataset.root=tests/data/fashion_mnist
         dataset.split=test)
fi
start=$(date +%s)
for seed in $seeds; do
  for opt in $optimizers; do
    train_or_resume "$out/$opt/seed$seed" "experiment=$experiment" "optimizer=$opt" "seed=$seed" "${smoke[@]}" "$@"
  done
done
runs=()
for opt in $optimizers; do
  dirs=$(for seed in $seeds; do printf '%s,' "$out/$opt/seed$seed"; done)
  runs+=(--run "${LABEL[$opt]:-$opt}=${dirs%,}")
  first=$(echo "$seeds" | awk '{print $1}')
  last=$(ls "$out/$opt/seed$first"/samples/iter_*_avg.png | tail -n 1)
  cp "$last" "$out/samples_$opt.png"
done
"$PY" -m dadam3.plot fidelity "${runs[@]}" --out "$out/${name}_fidelity.png"
"$PY" -m dadam3.plot summary "${runs[@]}" --out "$out/summary.md"
echo "$name: total wall time $(( $(date +%s) - start )) s"
