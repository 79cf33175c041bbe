#!/usr/bin/env bash
# CPU-scale experiment (beyond the paper): WGAN-GP on the 8-Gaussians ring with MLPs,
# M = 5 ring, Dadam3 vs DOSG vs DP-OAdam (experiment=toy_gaussians). Extra arguments go
# to every run, e.g. `bash scripts/toy_gaussians.sh loop.iterations=500`.
# Writes results/toy_gaussians/{dadam3,dosg,dp_oadam}/ (metrics.jsonl, samples/) and
# results/toy_gaussians/toy_gaussians.png. Like the other drivers (train_or_resume of
# scripts/runs.sh) a finished run is skipped, an interrupted one resumed and a diverged one
# skipped (it does not stop the others; the figure labels it, or leaves it out if it diverged
# before its first evaluation). A run trained before runs recorded their code (no
# provenance.json) is trained again in its directory (overwrite=true: only what that run wrote is
# deleted, its intermediate sample grids too), so every run here names its commit; its grids stay
# out of git (.gitignore: samples/), the report draws its own figure from metrics.jsonl. Other
# results are never deleted (remove a directory yourself to start it afresh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
source scripts/runs.sh
OUT=${TOY_OUT:-results/toy_gaussians}
runs=()
for opt in dadam3 dosg dp_oadam; do
  dir=$OUT/$opt
  if [ -f "$dir/metrics.jsonl" ] && [ ! -f "$dir/provenance.json" ] && ! diverged "$dir"; then
    echo "$dir: no provenance.json (trained before runs recorded their code): trained again"
    nice -n "${NICE:-10}" "$PY" -m dadam3.train experiment=toy_gaussians optimizer=$opt loop.progress=false "$@" \
      overwrite=true hydra.run.dir="$dir"
  else
    train_or_resume "$dir" experiment=toy_gaussians optimizer=$opt loop.progress=false "$@"
  fi
done
for opt in dadam3 dosg dp_oadam; do
  mapfile -t -O "${#runs[@]}" runs < <(plotted_run "${LABEL[$opt]:-DP-OAdam}" "$OUT/$opt" modes_covered)
done
if [ "${#runs[@]}" -gt 0 ]; then
  "$PY" -m dadam3.plot toy "${runs[@]}" --out "$OUT/toy_gaussians.png"
else
  echo "toy_gaussians: every run diverged before its first evaluation: no figure" >&2
  rm -f "$OUT/toy_gaussians.png"
fi
