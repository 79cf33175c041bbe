#!/usr/bin/env bash
# The runs an analysis plan governs (docs/analysis_plan/FAMILY.yaml, committed before the runs):
# evidence rounds 3 (issue 46) and 4 (issue 59), the heterogeneous-nodes studies (issues 43 and 58).
#
#   bash experiments/evidence_round3.sh FAMILY "SEEDS" "CELLS"
#   bash experiments/evidence_round3.sh FAMILY next ["SEEDS"]
#
#   next     the whole family, phase by phase: asks the report what the plan needs next
#            (python -m dadam3.report --next FAMILY: the step-size search, extended while its best
#            cell is at an edge, then the fresh seeds at the chosen cells), runs it seed by seed, and
#            asks again until nothing is left; "SEEDS" keeps only those seeds (two queues on two
#            cores: disjoint seeds; a queue with nothing of its own to run waits for the other's,
#            asking every POLL_S seconds, 60 by default, while the search still has runs left; once
#            only other seeds' fresh runs are left, nothing more can come its way and it stops,
#            status 0). A run that does not finish stops it. A seed
#            whose runs so far ran on another machine class (provenance device_model) is left for a
#            machine of that class (one line each); when only such seeds are left, it stops (status 3).
#   FAMILY   a plan's file name: fig2 | fig3 | heterogeneous | fig2_r4 | fig3_stable | shared_scale
#   SEEDS    e.g. "0 1 2" (selection) or "3 4 5 6 7" (fresh): seeds of the plan (others are refused)
#   CELLS    a plan with methods: METHOD@LR ... (a method of the plan and a step size of its grid, or
#            of the grid of the method it inherits from); with arms (heterogeneous): ARM ... A seed
#            whose runs so far ran on another machine class is refused before any run (status 3, one
#            line each)
#
# Seed by seed, then cell by cell, so that the runs one seed pairs run back to back on the same
# machine in the same session (the plan's one_machine_class_per_seed). Each run goes to the plan's
# runs/ folder (<runs>/lr<LR>/<OPTIMIZER>/seed<S>; a method or arm on data and a setting of its own:
# <runs>/<data>/<setting>/lr<LR>/<OPTIMIZER>/seed<S>) through scripts/fmnist_figure.sh, which skips a
# finished or diverged run and resumes an interrupted one: stop the script and call it again.
# Every run of a family comes from one clean commit (the report refuses to judge a family whose runs
# mix commits; a CODE with uncommitted changes to tracked files is refused here): CODE=DIR runs the cells in DIR, a clean worktree of that commit (its own
# scripts/fmnist_figure.sh and dadam3, its results/ folder), while this checkout's script, plans and
# report choose them, so a family begun on an older commit goes on with today's queue, e.g.
#   git worktree add ../r3 <commit>
#   CODE=../r3 nohup nice -n 19 bash experiments/evidence_round3.sh fig3 next "0 2 3 5" &   # one core
#   CODE=../r3 nohup nice -n 19 bash experiments/evidence_round3.sh fig3 next "1 4 6 7" &   # the other
# (CODE defaults to this checkout.) Then copy what the report reads into the repository's results/
# (metrics, configs, provenance: scripts/copy_runs.sh) and run `make report`. Cost on one idle core: ~3 min a one-node run, ~8 min
# an M = 5 run (two at once on a 2-core Intel Xeon or AMD EPYC machine, measured 2026-11-28).
set -euo pipefail
code=${CODE:-$(dirname "$0")/..}
[ -f "$code/scripts/fmnist_figure.sh" ] || {
  echo "error: CODE=$code: not a checkout of dadam3 (no scripts/fmnist_figure.sh in it); nothing run" >&2
  exit 2; }
export CODE; CODE=$(cd "$code" && pwd)
changed=$(git -C "$CODE" status --porcelain --untracked-files=no 2>&1) || {
  echo "error: CODE=$CODE: git cannot say which commit it is ($changed); nothing run" >&2; exit 2; }
[ -z "$changed" ] || {
  echo "error: CODE=$CODE: uncommitted changes to tracked files (${changed//$'\n'/; }): every run of a family comes from one clean commit; commit them or use a clean worktree (git worktree add); nothing run" >&2
  exit 2; }
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
family=${1:?FAMILY: a plan of docs/analysis_plan (fig2, fig3, heterogeneous, fig2_r4, fig3_stable, shared_scale)}
plan_seeds() {       # the plan's seeds, one line: its selection seeds (those its step-size search runs on), then with "all" its fresh seeds
  "$PY" -c "import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); print(*(d.get('selection') or {}).get('seeds', []), *(d['fresh_seeds'] if sys.argv[2] == 'all' else []))" "docs/analysis_plan/$1.yaml" "$2"
}
search_left() {      # do the lines "SEED CELLS..." of $1 (the report's --next) hold a run of a selection seed?
  local seed cells
  while read -r seed cells; do [[ " $searching " != *" $seed "* ]] || return 0; done <<< "$1"
  return 1
}
check_seeds() {      # every seed of $2 an integer and a seed of plan $1, else one line and status 2
  local known s; known=$(plan_seeds "$1" all) || { echo "error: FAMILY=$1: docs/analysis_plan/$1.yaml cannot be read; nothing run" >&2; exit 2; }
  for s in $2; do
    [[ "$s" =~ ^[0-9]+$ ]] && [[ " $known " == *" $s "* ]] || {
      echo "error: SEEDS: $s is not a seed of docs/analysis_plan/$1.yaml (allowed: $known); nothing run" >&2; exit 2; }
  done
}
if [ "${2:-}" = next ]; then
  [ -f "docs/analysis_plan/$family.yaml" ] || { echo "error: FAMILY=$family: no docs/analysis_plan/$family.yaml (allowed: $(cd docs/analysis_plan && ls -- *.yaml | sed 's/\.yaml$//' | tr '\n' ' ')); nothing run" >&2; exit 2; }
  check_seeds "$family" "${3:-}"
  only=${3:-} previous= waiting= said= searching=$(plan_seeds "$family" selection)
  held=$(mktemp); trap 'rm -f "$held"' EXIT
  while :; do
    rc=0; all=$("$PY" -m dadam3.report --results "$CODE/results" --plans docs/analysis_plan --next "$family" 2> "$held") || rc=$?
    [ "$rc" = 0 ] || [ "$rc" = 3 ] || { cat "$held" >&2; exit 2; }
    [ "$(cat "$held")" = "$said" ] || { said=$(cat "$held"); [ -z "$said" ] || echo "$said" >&2; }   # once each
    todo=$all
    [ -z "$only" ] || todo=$(while read -r seed cells; do
      for s in $only; do [ "$s" != "$seed" ] || echo "$seed $cells"; done; done <<< "$all")
    if [ -z "$all" ] && [ "$rc" = 3 ]; then
      echo "error: $family: what is left needs another machine class (above); nothing more run here" >&2; exit 3
    fi
    if [ -z "$all" ]; then echo "$family: nothing left to run; make report judges it"; exit 0; fi
    if [ -z "$todo" ] && ! search_left "$all"; then
      echo "$family: nothing left to run on seeds $only; the rest is other seeds' fresh runs: ${all//$'\n'/; }"
      exit 0
    fi
    if [ -z "$todo" ]; then      # the other seeds' search runs (another queue's) come first: its choice needs them
      [ -n "$waiting" ] || echo "$family: nothing to run on seeds $only until these are done: ${all//$'\n'/; }"
      waiting=1; sleep "${POLL_S:-60}"; continue
    fi
    waiting=
    if [ "$todo" = "$previous" ]; then
      echo "error: $family: still needed after running them: ${todo//$'\n'/; } (see each run's train.log); stopped" >&2
      exit 1
    fi
    previous=$todo
    while read -r seed cells; do
      bash experiments/evidence_round3.sh "$family" "$seed" "$cells" < /dev/null || exit $?
    done <<< "$todo"
  done
fi
seeds=${2:?SEEDS, e.g. \"0 1 2\", or next}
cells=${3:?CELLS: METHOD@LR ... or ARM ...}
plan=docs/analysis_plan/$family.yaml
[ -f "$plan" ] || { echo "error: FAMILY=$family: no $plan (allowed: $(cd docs/analysis_plan && ls -- *.yaml | sed 's/\.yaml$//' | tr '\n' ' ')); nothing run" >&2; exit 2; }

# every cell resolved before any run starts: one line per cell, "NAME|EXPERIMENT|METHOD|override ..."
resolved=$("$PY" - "$plan" "$cells" <<'PYEOF'
import sys
from pathlib import Path

from dadam3.report import read
from dadam3.report.families import method_grid
from dadam3.report.search import lr_folder
from dadam3.report.plan import load

try:
    plan, doc = load(Path(sys.argv[1])), read.yaml_file(Path(sys.argv[1]), {})
except Exception as e:                      # a damaged plan: one line naming it
    sys.exit(f"error: {e}; nothing run")
runs, experiment = plan.runs.removeprefix("results/fmnist/"), doc["experiment"]
for cell in sys.argv[2].split():
    if plan.arms:
        if cell not in plan.arms:
            sys.exit(f"error: cell {cell}: not an arm of {sys.argv[1]} (allowed: {', '.join(plan.arms)}); nothing run")
        data, setting, method, lr = plan.arms[cell]
        extra = doc["data"][data] + doc["settings"][setting]
        name = f"{runs}/{data}/{setting}/lr{lr_folder(lr)}"
    else:
        unit, _, lr_text = cell.partition("@")
        spec = plan.methods.get(unit)
        grid = method_grid(plan, unit) if spec is not None else ()
        lr = next((g for g in grid if lr_text and abs(g - float(lr_text)) <= 1e-12 * g), None) \
            if lr_text.replace(".", "", 1).replace("e-", "", 1).isdigit() else None
        if lr is None:
            sys.exit(f"error: cell {cell}: not METHOD@LR with METHOD one of {', '.join(plan.methods)} and LR on "
                     f"its grid in {sys.argv[1]}; nothing run")
        method = spec.optimizer
        extra = list(doc.get("overrides") or [])
        name = f"{runs}/lr{lr_folder(lr)}"
        if spec.data is not None:
            extra += doc["data"][spec.data] + doc["settings"][spec.setting]
            name = f"{runs}/{spec.data}/{spec.setting}/lr{lr_folder(lr)}"
    print("|".join([name, experiment, method, " ".join([f"optimizer.lr={lr_folder(lr)}", *extra])]))
PYEOF
) || exit 2

iterations=$("$PY" -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['iterations'])" "$plan")
[ "${SMOKE:-0}" = 1 ] || export ITERATIONS=$iterations   # SMOKE=1: fmnist_figure.sh's seconds-long runs

check_seeds "$family" "$seeds"
# shellcheck disable=SC2086  # the seeds are words
"$PY" -m dadam3.report --results "$CODE/results" --plans docs/analysis_plan --here "$family" $seeds || {
  rc=$?; [ "$rc" != 3 ] || echo "error: $family: seeds $seeds: a run of the seeds above here would mix machine classes within a seed; nothing run" >&2
  exit "$rc"; }
for seed in $seeds; do
  while IFS='|' read -r name experiment method overrides; do
    # shellcheck disable=SC2086  # the overrides are words
    (cd "$CODE" && PYTHON="$PY" bash scripts/fmnist_figure.sh "$name" "$experiment" "$method" "$seed" $overrides)
  done <<< "$resolved"
done
