#!/usr/bin/env bash
# Issue 32 point 3 on Fashion-MNIST, M = 5 (the Fig. 3 miniature): does the SGD baseline catch up
# with more iterations, or with the usual stabilisers? Two parts, each a variant of
# scripts/fmnist_lr_sweep.sh (its own folder results/fmnist/lr_sweep_<VARIANT>/, its own section
# in results/REPORT.md, every method chosen on seeds 0-2 at its own best and judged on fresh seeds):
#
#   PART=long     every method at its step size chosen on the 1,500-iteration sweep, 5,000
#                 iterations -> lr_sweep_long5000/ (DADAM3_LR, CADAM3_LR, DOSG_LR, COSG_LR: the chosen
#                 cells, default those of results/REPORT.md when this script was written)
#   PART=stable   linear lr warm-up over WARMUP iterations (default 500) and gradient clipping at
#                 CLIP (default 10) for EVERY method: DOSG/COSG at 8e-4 1.6e-3 3.2e-3 6.4e-3 1.28e-2
#                 2.56e-2 5.12e-2 (stabilised, they learn at step sizes that diverge without), Dadam3/Cadam3
#                 at 4e-4 8e-4 1.6e-3 3.2e-3 -> lr_sweep_warmup<WARMUP>_clip<CLIP>/
#
# SEEDS (default "0 1 2": the selection seeds; then SEEDS="3 4 5 6 7" CELLS="m@lr ..." at each
# method's chosen cell, as the report's selection table says) and CELLS narrow it, as in
# fmnist_lr_sweep.sh; a finished or diverged run is skipped and an interrupted one resumed, so the
# script can be stopped and called again. Cost: about 7 min per 1,500-iteration run and 23 min per
# 5,000-iteration run on one idle CPU core; PART=long is 12 runs, PART=stable 66 runs (seeds 0-2).
#   PART=long bash experiments/fmnist_longer_and_stabilised.sh
#   PART=stable SEEDS="3 4 5 6 7" CELLS="dosg@3.2e-3" bash experiments/fmnist_longer_and_stabilised.sh
set -euo pipefail
cd "$(dirname "$0")/.."
case "${PART:-}" in
  long)
    export VARIANT=long5000
    [ "${SMOKE:-0}" = 1 ] || export ITERATIONS=5000     # SMOKE: fmnist_figure.sh's tiny runs
    export CELLS=${CELLS:-"dadam3@${DADAM3_LR:-8e-4} cadam3@${CADAM3_LR:-8e-4} dosg@${DOSG_LR:-2e-4} cosg@${COSG_LR:-2e-4}"}
    exec bash scripts/fmnist_lr_sweep.sh "$@" ;;
  stable)
    warmup=${WARMUP:-500} clip=${CLIP:-10}
    export VARIANT=warmup${warmup}_clip${clip}
    export CELLS=${CELLS:-"$(for lr in 8e-4 1.6e-3 3.2e-3 6.4e-3 1.28e-2 2.56e-2 5.12e-2; do
      printf 'dosg@%s cosg@%s ' $lr $lr; done)$(for lr in 4e-4 8e-4 1.6e-3 3.2e-3; do
      printf 'dadam3@%s cadam3@%s ' $lr $lr; done)"}
    exec bash scripts/fmnist_lr_sweep.sh loop.lr_warmup="$warmup" loop.clip_grad_norm="$clip" "$@" ;;
  *)
    echo "PART=long or PART=stable (see the comment at the top of $0)" >&2
    exit 2 ;;
esac
