#!/usr/bin/env bash
# Beyond the paper (issue 36): how many gossip rounds t Dadam3 and DP-OAdam need on the synthetic
# game of Section 5.1, per topology (ring, torus, exponential, one-peer exponential, Erdos-Renyi,
# complete) and node count (M = 5, 16, 64), t = 1, 2, 3, 5, 8 (the grid: dadam3/gossip_study.py).
# One run directory per cell under results/gossip/ (GOSSIP_OUT=DIR elsewhere); a finished cell is
# skipped, so a stopped study goes on where it stopped when called again. JOBS cells run side by
# side (default 2), one thread each. SMOKE=1: a tiny grid on an easy game (seconds), for the tests.
# The report's section "Beyond the paper: gossip rounds and topology" reads them (`make report`).
# HETEROGENEOUS=1 (issue 43): the same table on the heterogeneous game (game.spread 0.5 and 1: node i
# draws a = c w.p. (1 + s u_i)/3, the average game unchanged), Dadam3 on the ring and the complete
# graph (t = 1 only there: W^t = W), into results/gossip_heterogeneous/ (~20 min of CPU at one thread,
# mostly the complete graph of 64 nodes; read by the report's section
# "Beyond the paper: heterogeneous nodes").
#   bash experiments/gossip_rounds.sh
#   JOBS=1 GOSSIP_OUT=/tmp/g SMOKE=1 bash experiments/gossip_rounds.sh
#   JOBS=1 HETEROGENEOUS=1 nice -n 19 bash experiments/gossip_rounds.sh
# SHARED_SCALE=1 (issue 58): on that game, Dadam3 against one adaptive scale for every node (dadam3_shared,
# tracked by gossip) and its ideal reference (dadam3_shared_exact, the scales averaged exactly), spread 0.5
# and 1, M = 5, 16, 64, the ring at t = 1 and 3 and the complete graph, into results/shared_scale_game/
# (read by the report's section "Beyond the paper: one adaptive scale for every node"):
#   JOBS=1 SHARED_SCALE=1 nice -n 19 bash experiments/gossip_rounds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
ARGS=(--jobs "${JOBS:-2}")
[ -n "${GOSSIP_OUT:-}" ] && ARGS+=(--out "$GOSSIP_OUT")
[ "${SMOKE:-0}" = 1 ] && ARGS+=(--smoke)
[ "${HETEROGENEOUS:-0}" = 1 ] && ARGS+=(--heterogeneous)
[ "${SHARED_SCALE:-0}" = 1 ] && ARGS+=(--shared-scale)
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=1 exec "$PY" -m dadam3.gossip_study "${ARGS[@]}"
