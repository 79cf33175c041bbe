#!/usr/bin/env bash
# Every method at its own step sizes on Fashion-MNIST (the miniature presets), SEEDS (default
# "0 1 2") each, so that results/REPORT.md can compare each method at its best step size beside
# the paper's one shared step size:
#   OAdagrad, one node (experiment=fmnist_fig2):     1e-3 3e-3 1e-2 2e-2 3e-2 5e-2 1e-1
#   Adam3, one node (experiment=fmnist_fig2):        4e-4 8e-4 1.6e-3 3.2e-3
#   DOSG and COSG, M = 5 (experiment=fmnist_fig3):   5e-5 2e-4 8e-4 1.1e-3 1.3e-3 1.6e-3 3.2e-3 6.4e-3
#   Dadam3 and Cadam3, M = 5 (experiment=fmnist_fig3): 4e-4 8e-4 1.6e-3 3.2e-3
# (issue 32: every best value has a tried worse value on each side; the step size is chosen on
# seeds 0-2 and confirmed on fresh seeds, e.g. SEEDS="3 4 5 6 7" CELLS="adam3@8e-4").
# into results/fmnist/lr_sweep/lr<lr>/<method>/seed<s>/, except the presets' own step size 2e-4,
# whose runs are those of scripts/fmnist_fig3.sh (results/fmnist/fig3/<method>/seed<s>/: the same
# runs, trained once). PROBES=1 also runs the probes that are committed too (DOSG and COSG at
# 1.28e-2 and 5.12e-2 with SEEDS; Dadam3 and Cadam3 at 5e-5, seed 0).
# Like every Fashion-MNIST driver (scripts/fmnist_figure.sh) a finished or diverged run is skipped
# and an interrupted one resumed, so the script can be stopped and called again. Extra arguments
# are Hydra overrides for every run. VARIANT=NAME runs the whole grid, 2e-4 included, into
# results/fmnist/lr_sweep_NAME/ instead: a variant with other options, e.g.
#   VARIANT=clip10 bash scripts/fmnist_lr_sweep.sh loop.clip_grad_norm=10
# CELLS="METHOD@LR ..." runs only those cells: of the grid, and any other step size named there
# (e.g. CELLS="dosg@2.56e-2", to bracket a best value at the grid's edge); the committed clipped variant is
#   VARIANT=clip100 CELLS="dosg@1.6e-3 cosg@1.6e-3 dadam3@8e-4 cadam3@8e-4" \
#     bash scripts/fmnist_lr_sweep.sh loop.clip_grad_norm=100
# (the report gives each lr_sweep_* folder its own section). Tables and figures: `make report`
# (results/REPORT.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# the presets' length: a run that finished short of it (a probe with ITERATIONS=250) goes on
if [ "${SMOKE:-0}" != 1 ]; then export ITERATIONS=${ITERATIONS:-1500}; fi
seeds=${SEEDS:-0 1 2}
sweep=lr_sweep${VARIANT:+_$VARIANT}

# experiment_of METHOD: the preset a method runs in (one node or M = 5); "" for an unknown one
experiment_of() {
  case "$1" in adam3|oadagrad) echo fmnist_fig2 ;; dadam3|cadam3|dosg|cosg) echo fmnist_fig3 ;; *) echo "" ;; esac
}
for c in ${CELLS:-}; do       # every cell checked before any run starts
  if [ -z "$(experiment_of "${c%%@*}")" ] || ! [[ "${c#*@}" =~ ^[0-9.]+(e-?[0-9]+)?$ ]] || [[ "$c" != *@* ]]; then
    echo "error: CELLS=$c: not METHOD@LR with METHOD one of adam3 oadagrad dadam3 cadam3 dosg cosg and LR a" \
         "positive number (e.g. dosg@2.56e-2); nothing run" >&2
    exit 2
  fi
done
ran=" "

# cell LR EXPERIMENT "METHODS" SEEDS [overrides...]
cell() {
  local lr=$1 experiment=$2 methods=$3 these=$4 m keep=""
  shift 4
  if [ -n "${CELLS:-}" ]; then
    for m in $methods; do case " $CELLS " in *" $m@$lr "*) keep="$keep $m" ;; esac; done
    methods=${keep# }
    [ -n "$methods" ] || return 0
  fi
  for m in $methods; do ran="$ran$m@$lr "; done
  if [ "$lr" = 2e-4 ] && [ "$experiment" = fmnist_fig3 ] && [ "$sweep" = lr_sweep ]; then
    bash scripts/fmnist_figure.sh fig3 fmnist_fig3 "$methods" "$these" "$@"
  else
    bash scripts/fmnist_figure.sh "$sweep/lr$lr" "$experiment" "$methods" "$these" "optimizer.lr=$lr" "$@"
  fi
}

for lr in 1e-3 3e-3 1e-2 2e-2 3e-2 5e-2 1e-1; do cell "$lr" fmnist_fig2 oadagrad "$seeds" "$@"; done
for lr in 4e-4 8e-4 1.6e-3 3.2e-3; do cell "$lr" fmnist_fig2 adam3 "$seeds" "$@"; done
for lr in 5e-5 2e-4 8e-4 1.1e-3 1.3e-3 1.6e-3 3.2e-3 6.4e-3; do cell "$lr" fmnist_fig3 "dosg cosg" "$seeds" "$@"; done
for lr in 4e-4 8e-4 1.6e-3 3.2e-3; do cell "$lr" fmnist_fig3 "dadam3 cadam3" "$seeds" "$@"; done
if [ "${PROBES:-0}" = 1 ]; then
  for lr in 1.28e-2 5.12e-2; do cell "$lr" fmnist_fig3 "dosg cosg" "$seeds" "$@"; done
  cell 5e-5 fmnist_fig3 "dadam3 cadam3" 0 "$@"
fi
for c in ${CELLS:-}; do       # a step size off the grid, named in CELLS
  case "$ran" in *" $c "*) ;; *) cell "${c#*@}" "$(experiment_of "${c%%@*}")" "${c%%@*}" "$seeds" "$@" ;; esac
done
echo "tables and figures: make report (results/REPORT.md)"
