#!/usr/bin/env bash
# Paper Fig. 1: Dadam3 vs DP-OAdam on the synthetic game of Section 5.1 at the paper's
# settings (M = 5 ring, c = 1010, k = 0.01, N = 1e7, eta = 1e-2, beta1 = 0,
# beta2 = 1/(1+c^2), beta3 = 0.1, all at zero). Extra arguments go to both runs,
# e.g. `bash scripts/fig1_synthetic.sh iterations=100000 seed=1`.
# Writes outputs/fig1/{dadam3,dp_oadam}/ (metrics.csv, .hydra/config.yaml, overrides.yaml, provenance.json,
# synthetic.log, status.json) and outputs/fig1/fig1_synthetic.png, replacing an earlier rerun there
# (overwrite=true), then compares the curves with the committed ones in results/fig1/
# (scripts/fig1_compare.py: "reproduced the committed curve to a relative difference of 0.0e+00"):
# a clone's tracked files stay as they are. FIG1_OUT=results/fig1 replaces the committed results
# deliberately (their provenance then records this machine and this run's start); commit them.
# The two runs go side by side, one thread each; each one's output is shown whole once both
# have ended (Dadam3's first), and the figure is drawn only when both finished: the plot starts
# with them (its imports overlap theirs) and waits for a line on its standard input ("go"; the
# end of it when a run failed or this script stops: nothing drawn). A stop signal
# to this script is passed on to both runs (each records "interrupted" in its status.json).
# NICE=N: both runs start under `nice -n N` (0 to 19; default 0: Fig. 1's times are the driver's own).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
if ! [[ ${NICE:-0} =~ ^([0-9]|1[0-9])$ ]]; then
  echo "error: NICE=${NICE}: the niceness increment of each run (nice -n): a whole number from 0 to 19" >&2
  exit 2
fi
OUT=${FIG1_OUT:-outputs/fig1}
OPTS=(dadam3 dp_oadam)
LOGS=$(mktemp -d)
PIDS=()
trap 'rm -rf "$LOGS"' EXIT
trap 'kill -TERM "${PIDS[@]}" 2>/dev/null || true' INT TERM
coproc PLOT { exec "$PY" -m dadam3.plot fig1 --wait --run "Dadam3=$OUT/dadam3" --run "DP-OAdam=$OUT/dp_oadam" \
  --out "$OUT/fig1_synthetic.png" >"$LOGS/plot.out" 2>"$LOGS/plot.err"; }
PLOT_WAIT=$PLOT_PID                # bash unsets PLOT_PID once the plot has ended: its pid kept here
for opt in "${OPTS[@]}"; do
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=1 \
    nice -n "${NICE:-0}" "$PY" -m dadam3.synthetic optimizer="$opt" overwrite=true "$@" hydra.run.dir="$OUT/$opt" \
    >"$LOGS/$opt" 2>&1 &
  PIDS+=($!)
done
status=0
for i in "${!OPTS[@]}"; do
  # `wait` returns early (status > 128) when a trapped signal arrives: wait again for the run's own status
  while :; do
    rc=0
    wait "${PIDS[$i]}" || rc=$?
    kill -0 "${PIDS[$i]}" 2>/dev/null || break
  done
  cat "$LOGS/${OPTS[$i]}" >&2
  if [ "$rc" -ne 0 ]; then
    echo "fig1_synthetic.sh: optimizer=${OPTS[$i]} failed (exit status $rc); see its output above" >&2
    [ "$status" -ne 0 ] || status=$rc
  fi
done
PLOT_IN=${PLOT[1]:-}              # empty when the plot already ended (it says why below)
if [ "$status" -ne 0 ]; then
  [ -z "$PLOT_IN" ] || eval "exec $PLOT_IN>&-"    # the end of its input: it exits, drawing nothing
  wait "$PLOT_WAIT" 2>/dev/null || true
  exit "$status"
fi
[ -z "$PLOT_IN" ] || echo go >&"$PLOT_IN" 2>/dev/null || true
rc=0
wait "$PLOT_WAIT" || rc=$?
cat "$LOGS/plot.out"
cat "$LOGS/plot.err" >&2
[ "$rc" -eq 0 ] || exit "$rc"
# the paper's settings (no extra arguments) into another folder: compare with the committed curves
if [ "$#" -eq 0 ] && [ "$(realpath -m "$OUT")" != "$(realpath -m results/fig1)" ]; then
  "$PY" scripts/fig1_compare.py "$OUT" results/fig1
fi
