#!/usr/bin/env bash
# Paper Fig. 1: Dadam3 vs DP-OAdam on the synthetic game of Section 5.1 at the paper's
# settings (M = 5 ring, c = 1010, k = 0.01, N = 1e7, eta = 1e-2, beta1 = 0,
# beta2 = 1/(1+c^2), beta3 = 0.1, all at zero). Extra arguments go to both runs,
# e.g. `bash scripts/fig1_synthetic.sh iterations=100000 seed=1`.
# Writes results/fig1/{dadam3,dp_oadam}/metrics.csv (and .hydra/config.yaml, overrides.yaml) and
# results/fig1/fig1_synthetic.png, replacing the earlier results there (overwrite=true): the runs
# are deterministic, so a rerun with the same code and settings rewrites the same bytes and
# leaves a clone's committed files unchanged (synthetic.log, status.json, .hydra/hydra.yaml and
# .lock are git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${FIG1_OUT:-results/fig1}
for opt in dadam3 dp_oadam; do
  "$PY" -m dadam3.synthetic optimizer=$opt overwrite=true "$@" hydra.run.dir="$OUT/$opt"
done
"$PY" -m dadam3.plot fig1 --run "Dadam3=$OUT/dadam3" --run "DP-OAdam=$OUT/dp_oadam" --out "$OUT/fig1_synthetic.png"
