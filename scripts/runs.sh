# Sourced by the figure drivers (is_figure.sh, toy_gaussians.sh, fmnist_figure.sh); needs PY (the python to run).
# NICE=N: each training run starts under `nice -n N` (default 10: a long run yields the CPU to the
# machine's other work; 0: at the driver's own priority, as the test suite runs them).
if ! [[ ${NICE:-10} =~ ^([0-9]|1[0-9])$ ]]; then
  echo "error: NICE=${NICE}: the niceness increment of each run (nice -n): a whole number from 0 to 19" >&2
  exit 2
fi

# optimizer name -> its label in legends and tables
declare -A LABEL=([adam3]=Adam3 [oadagrad]=OAdagrad [dadam3]=Dadam3 [cadam3]=Cadam3 [dosg]=DOSG [cosg]=COSG)

# diverged DIR: the run's log says it diverged: its last record (a NaN/Inf stop, loop.diverge_above), or a
# non-finite, out-of-bound or frozen loss anywhere in it whatever its last record says (as the report and a
# rerun sweep read it: dadam3.run.divergence.run_breach)
diverged() {
  [ -f "$1/metrics.jsonl" ] && "$PY" - "$1/metrics.jsonl" <<'PYEOF'
import sys
from dadam3.run.divergence import run_breach
from dadam3.run.rewind import read_records
sys.exit(0 if run_breach(read_records(sys.argv[1])) is not None else 1)
PYEOF
}

# train_or_resume DIR [hydra overrides...]: a finished run is skipped, and so is a diverged one (a
# divergence is a result: resuming it would diverge again; remove DIR to train it afresh); one with
# a checkpoint is resumed, anything else starts afresh (overwrite=true: without a checkpoint there
# is nothing to continue, only the log of a run killed before its first checkpoint). A run that
# diverges now returns 0, so the driver goes on to the next runs and the figure; any other
# failure returns the trainer's exit status.
train_or_resume() {
  local dir=$1 rc=0
  shift
  if tail -n 1 "$dir/metrics.jsonl" 2>/dev/null | grep -q '"status": "finished"'; then   # the last record decides
    if diverged "$dir"; then            # a "finished" log with a NaN / -Infinity loss in it: a diverged run
      echo "$dir: diverged, skipped (its log says where; remove the directory to train it afresh)"
    else
      echo "$dir: finished, skipped"
    fi
    return 0
  elif diverged "$dir"; then
    echo "$dir: diverged, skipped (its log says where; remove the directory to train it afresh)"
    return 0
  elif [ -f "$dir/checkpoints/last.pt" ]; then
    nice -n "${NICE:-10}" "$PY" -m dadam3.train "$@" "resume=$dir" hydra.run.dir="$dir" || rc=$?
  else
    nice -n "${NICE:-10}" "$PY" -m dadam3.train "$@" overwrite=true hydra.run.dir="$dir" || rc=$?
  fi
  if [ "$rc" -ne 0 ] && diverged "$dir"; then
    echo "$dir: diverged (its last record says where); going on with the next run"
    return 0
  fi
  return "$rc"
}

# plotted_run LABEL DIR KEY: "--run LABEL=DIR" (LABEL marked "(diverged)" for a diverged run) when
# DIR/metrics.jsonl has a record with KEY; nothing (and a note on stderr) when the run diverged
# before it logged one
plotted_run() {
  local label=$1 dir=$2 key=$3
  if ! grep -qs "\"$key\"" "$dir/metrics.jsonl"; then
    echo "$dir: no $key record (diverged before its first evaluation): not in the figure" >&2
    return 0
  fi
  if diverged "$dir"; then label="$label (diverged)"; fi
  printf '%s\n' --run "$label=$dir"
}
