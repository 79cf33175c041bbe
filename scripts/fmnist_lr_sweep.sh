#!/usr/bin/env bash
# Beyond the paper: the Fig. 3 methods on Fashion-MNIST (experiment=fmnist_fig3, seed 0 only: one
# seed per step size) at other step sizes than the preset's shared 2e-4, so a reader can tell
# whether a ranking is an artefact of that one step size:
#   LRS="5e-5 8e-4"                   all four methods (Dadam3, Cadam3, DOSG, COSG)
#   SGD_LRS="1.6e-3 3.2e-3 1.28e-2 5.12e-2"  DOSG and COSG only (plain SGD-type steps usually want a
#                                     larger step size than Adam-type ones)
# The 2e-4 rows are the seed-0 runs of scripts/fmnist_fig3.sh (not trained twice). Writes
# results/fmnist/lr_sweep/lr<lr>/ (the runs, <lr>_fidelity.png, summary.md per step size) and
# results/fmnist/lr_sweep/summary.md (every method at every step size it ran). SUMMARY_ONLY=1:
# no training, just that summary from the runs that exist (an unfinished or diverged run says
# so). A diverged run (NaN/Inf) is a result: it is not retrained. Extra arguments go to every run.
set -euo pipefail
cd "$(dirname "$0")/.."
# the preset's length: a run that finished short of it (e.g. a probe with ITERATIONS=250) goes on
if [ "${SMOKE:-0}" != 1 ]; then export ITERATIONS=${ITERATIONS:-1500}; fi
out=${FMNIST_OUT:-results/fmnist}
lrs=${LRS-5e-5 8e-4}
sgd_lrs=${SGD_LRS-1.6e-3 3.2e-3 1.28e-2 5.12e-2}
if [ "${SUMMARY_ONLY:-0}" != 1 ]; then
  for lr in $lrs; do
    bash scripts/fmnist_figure.sh "lr_sweep/lr$lr" fmnist_fig3 "dadam3 cadam3 dosg cosg" 0 "optimizer.lr=$lr" "$@"
  done
  for lr in $sgd_lrs; do
    bash scripts/fmnist_figure.sh "lr_sweep/lr$lr" fmnist_fig3 "dosg cosg" 0 "optimizer.lr=$lr" "$@"
  done
fi
runs=()
notes=()
for opt in dadam3 cadam3 dosg cosg; do
  case $opt in dosg|cosg) mine="$lrs $sgd_lrs" ;; *) mine=$lrs ;; esac
  for lr in $(printf '%s\n' 2e-4 $mine | sort -g); do
    dir=$out/lr_sweep/lr$lr/$opt/seed0
    [ "$lr" = 2e-4 ] && dir=$out/fig3/$opt/seed0
    [ -f "$dir/metrics.jsonl" ] || continue
    runs+=(--run "$opt, lr $lr=$dir")
    if tail -n 1 "$dir/metrics.jsonl" | grep -q '"status": "diverged"'; then
      notes+=("$opt at lr $lr diverged: $(tail -n 1 "$dir/metrics.jsonl" | sed -n 's/.*"message": "\([^"]*\)".*/\1/p').")
    fi
  done
done
"${PYTHON:-python}" -m dadam3.plot summary "${runs[@]}" --out "$out/lr_sweep/summary.md"
{
  echo
  echo "One seed (0) per step size. The lr 2e-4 rows are the seed-0 runs of Fig. 3 (\`fig3/<method>/seed0\`)."
  if [ ${#notes[@]} -gt 0 ]; then echo; printf -- '- %s\n' "${notes[@]}"; fi
} >> "$out/lr_sweep/summary.md"
