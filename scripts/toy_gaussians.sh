#!/usr/bin/env bash
# CPU-scale experiment (beyond the paper): WGAN-GP on the 8-Gaussians ring with MLPs,
# M = 5 ring, Dadam3 vs DOSG vs DP-OAdam (experiment=toy_gaussians). Extra arguments go
# to every run, e.g. `bash scripts/toy_gaussians.sh iterations=500`.
# Writes results/toy_gaussians/{dadam3,dosg,dp_oadam}/ (metrics.jsonl, samples/) and
# results/toy_gaussians/toy_gaussians.png.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${TOY_OUT:-results/toy_gaussians}
for opt in dadam3 dosg dp_oadam; do
  rm -rf "$OUT/$opt"
  "$PY" -m dadam3.train experiment=toy_gaussians optimizer=$opt progress=false "$@" hydra.run.dir="$OUT/$opt"
done
"$PY" -m dadam3.plot toy --run "Dadam3=$OUT/dadam3" --run "DOSG=$OUT/dosg" --run "DP-OAdam=$OUT/dp_oadam" \
  --out "$OUT/toy_gaussians.png"
