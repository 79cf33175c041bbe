#!/usr/bin/env bash
# Shared driver of the Fashion-MNIST experiments (scripts/fmnist_fig2.sh, fmnist_fig3.sh,
# fmnist_lr_sweep.sh, fmnist_paper_scale.sh).
# usage: scripts/fmnist_figure.sh NAME EXPERIMENT "OPTIMIZERS" "SEEDS" [hydra overrides...]
# Trains experiment=EXPERIMENT for every seed and optimizer into
# ${FMNIST_OUT:-results/fmnist}/NAME/<optimizer>/seed<seed>/ (seed by seed, so a partial run
# already covers every method; an interrupted run is resumed, a finished or diverged one skipped:
# its metrics.jsonl decides, a non-finite logged loss making it diverged), then draws IS and FID against iteration (node mean
# solid, node-averaged model dashed, band of mean ± 1 sample SD over seeds) into
# NAME_fidelity.png and writes summary.md (final IS / FID / KID, mean ± sample SD over seeds,
# and the path of each method's last averaged-model sample grid of the first seed): quick looks,
# git-ignored under results/; the committed tables and figures come from `make report`.
# NICE=N: each run's niceness increment (scripts/runs.sh; default 10).
# ITERATIONS=N: train to N iterations (overrides the preset); a run that finished short of N
# is continued from its last checkpoint, so a long experiment can go as far as time allows
# and be extended later. SMOKE=1: seconds-long CPU runs on the committed 1000-image subset.
# Every run directory is tidied after training: no machine's absolute path in train.log, and no
# byte copies (the logger's images/samples_averaged/ duplicates samples/*_avg.png; with one
# node, node00's grid duplicates the averaged model's). Hydra's .hydra/hydra.yaml (absolute
# paths) is git-ignored under results/. Samples (samples/, every evaluation's and every node's grid) and
# checkpoints stay in the run directory, git-ignored: rerunning the run's command (its .hydra/overrides.yaml,
# at the commit its provenance.json names) writes them again (docs/results.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
source scripts/runs.sh
name=$1; experiment=$2; optimizers=$3; seeds=$4; shift 4
out=${FMNIST_OUT:-results/fmnist}/$name
extra=()
if [ "${SMOKE:-0}" = 1 ]; then
  extra=(loop.iterations=4 model.width=0.03125 loop.batch_size=4 loop.log_every=2 loop.sample_every=2 loop.checkpoint_every=2
         metrics.every=2 metrics.samples=20 metrics.batch_size=20 dataset.root=tests/data/fashion_mnist
         dataset.split=test device=cpu threads=1)
fi
if [ -n "${ITERATIONS:-}" ]; then extra+=("loop.iterations=$ITERATIONS"); fi

# finished_short DIR: the run finished at fewer than $ITERATIONS iterations (so it can go on) and its
# log holds no non-finite or out-of-bound loss (dadam3.run.divergence.run_breach: such a run diverged)
finished_short() {
  [ -n "${ITERATIONS:-}" ] && [ -f "$1/checkpoints/last.pt" ] && "$PY" - "$1/metrics.jsonl" "$ITERATIONS" <<'PYEOF'
import sys
from dadam3.run.divergence import run_breach
from dadam3.run.rewind import read_records
records = read_records(sys.argv[1])
last = records[-1] if records else None
sys.exit(0 if last and last.get("status") == "finished" and last.get("iteration", 0) < int(sys.argv[2])
         and run_breach(records) is None else 1)
PYEOF
}

# tidy DIR: the repository's absolute path out of train.log; byte copies removed
tidy() {
  local dir=$1 f avg
  [ -f "$dir/train.log" ] && sed -i "s|$PWD/||g" "$dir/train.log"
  if [ -f "$dir/train.log" ] && [ ! -s "$dir/train.log" ]; then rm "$dir/train.log"; fi   # a run that diverged at once
  for f in "$dir"/images/samples_averaged/*.png; do
    [ -e "$f" ] || continue
    avg=$(printf '%s/samples/iter_%06d_avg.png' "$dir" "$((10#$(basename "$f" .png)))")
    if cmp -s "$f" "$avg"; then rm "$f"; fi
  done
  rmdir "$dir/images/samples_averaged" "$dir/images" 2>/dev/null || true
  for f in "$dir"/samples/iter_*_node00.png; do
    [ -e "$f" ] || continue
    if [ ! -e "${f%_node00.png}_node01.png" ] && cmp -s "$f" "${f%_node00.png}_avg.png"; then rm "$f"; fi
  done
}

start=$(date +%s)
for seed in $seeds; do
  for opt in $optimizers; do
    dir=$out/$opt/seed$seed
    args=("experiment=$experiment" "optimizer=$opt" "seed=$seed" "${extra[@]}" "$@")
    if diverged "$dir"; then
      echo "$dir: diverged, skipped (its last record says where)"
    elif finished_short "$dir"; then
      nice -n "${NICE:-10}" "$PY" -m dadam3.train "${args[@]}" "resume=$dir" hydra.run.dir="$dir" || diverged "$dir"
    else
      train_or_resume "$dir" "${args[@]}" || diverged "$dir"   # a divergence is a result, not a failure
    fi
    tidy "$dir"
  done
done
runs=()
grids=()
first=$(echo "$seeds" | awk '{print $1}')
for opt in $optimizers; do
  dirs=$(for seed in $seeds; do printf '%s,' "$out/$opt/seed$seed"; done)
  runs+=(--run "${LABEL[$opt]:-$opt}=${dirs%,}")
  last=$(ls "$out/$opt/seed$first"/samples/iter_*_avg.png 2>/dev/null | tail -n 1 || true)
  if [ -n "$last" ]; then grids+=("[${LABEL[$opt]:-$opt}](${last#"$out/"})"); else grids+=("${LABEL[$opt]:-$opt}: none"); fi
done
# a quick look beside the runs (git-ignored under results/; the report is `make report`): a run that
# diverged before its first evaluation leaves nothing to draw, which is no reason to stop a sweep
if ! "$PY" -m dadam3.plot fidelity "${runs[@]}" --out "$out/${name##*/}_fidelity.png" 2>/dev/null; then
  rm -f "$out/${name##*/}_fidelity.png"
  echo "$name: no quick-look figure (a run has no evaluation)"
fi
"$PY" -m dadam3.plot summary "${runs[@]}" --out "$out/summary.md"
echo "
Last sample grid of each method's node-averaged model (seed $first): $(IFS=,; echo "${grids[*]}" | sed 's/,/, /g')." >> "$out/summary.md"
echo "$name: total wall time $(( $(date +%s) - start )) s"
