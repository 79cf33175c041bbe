#!/usr/bin/env bash
# Paper Figs. 2 and 3 on Fashion-MNIST at Table 6's settings, for a GPU: full-width nets, batch
# 64, lr 5e-5, 30 000 iterations, 3 seeds (presets experiment=fmnist_paper_fig2 / _fig3, which
# are the miniatures fmnist_fig2 / fmnist_fig3 at Table 6's scale, device=cuda threads=null).
# Writes results/fmnist/paper_fig2/ and paper_fig3/ with the miniature driver's conventions
# (scripts/fmnist_figure.sh: resume / skip, <fig>_fidelity.png with seed bands, summary.md, the
# path of each method's last sample grid).
#   FIGS="fig2 fig3"  which figures (in this order)
#   SEEDS="0 1 2"     which seeds (trained seed by seed: seed 0 of every method first)
#   ITERATIONS=30000  how far to train; a run that finished short of it is continued, so
#                     `ITERATIONS=2000 bash scripts/fmnist_paper_scale.sh` goes part of the way and
#                     a later call with a larger value (or none) extends the same runs
#   SMOKE=1           seconds-long CPU runs on the committed 1000-image subset (with FMNIST_OUT)
#   FMNIST_OUT=DIR    instead of results/fmnist
# Extra arguments are Hydra overrides for every run (e.g. device=cuda:1).
set -euo pipefail
here=$(dirname "$0")
if [ "${SMOKE:-0}" != 1 ]; then export ITERATIONS=${ITERATIONS:-30000}; fi
for fig in ${FIGS:-fig2 fig3}; do
  case $fig in
    fig2) opts="adam3 oadagrad" ;;
    fig3) opts="dadam3 cadam3 dosg cosg" ;;
    *) echo "error: FIGS: unknown figure '$fig' (fig2 | fig3)" >&2; exit 2 ;;
  esac
  bash "$here/fmnist_figure.sh" "paper_$fig" "fmnist_paper_$fig" "$opts" "${SEEDS:-0 1 2}" "$@"
done
