#!/usr/bin/env bash
# Copy finished (or diverged) run directories from a worktree's results/ into this repository's
# results/, keeping only what the report reads and a reader needs to trust it: metrics.jsonl,
# config_resolved.yaml, .hydra/config.yaml and overrides.yaml, provenance.json (+ code.diff),
# run_id, train.log (the worktree's absolute path in it written results/). Samples and checkpoints
# stay in the worktree (regenerate them by rerunning the run's command: its config and commit are in
# what is copied).
#
#   bash scripts/copy_runs.sh SRC_RESULTS SUBDIR
#   e.g. bash scripts/copy_runs.sh ../r3/results fmnist/round3
#
# A run still in progress (its last record is not "finished", and it has not diverged) is left out
# and named. An existing copy is replaced only by a run directory with the same run_id.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?SRC_RESULTS: the results/ folder of the worktree that made the runs}
sub=${2:?SUBDIR under results/, e.g. fmnist/round3}
PY=${PYTHON:-python}
[ -d "$src/$sub" ] || { echo "error: $src/$sub: no such directory; nothing copied" >&2; exit 2; }
src_abs=$(cd "$src" && pwd -P)
copied=0 left=0
while IFS= read -r -d '' metrics; do
  run=$(dirname "$metrics")
  rel=${run#"$src"/}
  done_or_diverged=$("$PY" - "$metrics" <<'PYEOF'
import sys
from dadam3.run.divergence import run_breach
from dadam3.run.rewind import read_records
records = read_records(sys.argv[1])
finished = bool(records) and records[-1].get("status") == "finished"
print("yes" if finished or run_breach(records) is not None else "no")
PYEOF
)
  if [ "$done_or_diverged" != yes ]; then
    echo "left out (still running or interrupted): $rel"; left=$((left + 1)); continue
  fi
  dest=results/$rel
  if [ -f "$dest/run_id" ] && ! cmp -s "$dest/run_id" "$run/run_id"; then
    echo "error: $dest holds another run (run_id differs); nothing copied for it" >&2; exit 1
  fi
  mkdir -p "$dest/.hydra"
  for f in metrics.jsonl config_resolved.yaml provenance.json code.diff run_id \
           .hydra/config.yaml .hydra/overrides.yaml; do
    if [ -f "$run/$f" ]; then cp -p "$run/$f" "$dest/$f"; fi
  done
  if [ -f "$run/train.log" ]; then      # the worktree's absolute path, where the log names the run, as results/
    # (also the path of another checkout where the run was made and copied from: .../results/<the run>)
    rel_re=$(printf '%s' "$rel" | sed 's/[][\\.*^$#]/\\&/g')
    sed -e "s#$src_abs/#results/#g" -e "s#/[^ ]*/results/$rel_re#results/$rel#g" "$run/train.log" > "$dest/train.log"
    touch -r "$run/train.log" "$dest/train.log"
  fi
  copied=$((copied + 1))
done < <(find "$src/$sub" -name metrics.jsonl -print0 | sort -z)
echo "copied $copied run(s) into results/$sub; $left left out"
