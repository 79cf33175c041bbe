#!/usr/bin/env bash
# Beyond the paper (issue 36): how many gossip rounds t Dadam3 and DP-OAdam need on the synthetic
# game of Section 5.1, per topology (ring, torus, exponential, one-peer exponential, Erdos-Renyi,
# complete) and node count (M = 5, 16, 64), t = 1, 2, 3, 5, 8 (the grid: dadam3/gossip_study.py).
# One run directory per cell under results/gossip/ (GOSSIP_OUT=DIR elsewhere); a finished cell is
# skipped, so a stopped study goes on where it stopped when called again. JOBS cells run side by
# side (default 2), one thread each. SMOKE=1: a tiny grid on an easy game (seconds), for the tests.
# The report's section "Beyond the paper: gossip rounds and topology" reads them (`make report`).
#   bash experiments/gossip_rounds.sh
#   JOBS=1 GOSSIP_OUT=/tmp/g SMOKE=1 bash experiments/gossip_rounds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
ARGS=(--out "${GOSSIP_OUT:-results/gossip}" --jobs "${JOBS:-2}")
[ "${SMOKE:-0}" = 1 ] && ARGS+=(--smoke)
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=1 exec "$PY" -m dadam3.gossip_study "${ARGS[@]}"
