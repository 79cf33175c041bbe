#!/usr/bin/env bash
# Evidence round 3 (issue 46) and the heterogeneous-nodes study (issue 43): the runs their analysis
# plans govern (docs/analysis_plan/FAMILY.yaml, committed before the runs).
#
#   bash experiments/evidence_round3.sh FAMILY "SEEDS" "CELLS"
#   bash experiments/evidence_round3.sh FAMILY next ["SEEDS"]
#
#   next     the whole family, phase by phase: asks the report what the plan needs next
#            (python -m dadam3.report --next FAMILY: the step-size search, extended while its best
#            cell is at an edge, then the fresh seeds at the chosen cells), runs it seed by seed, and
#            asks again until nothing is left; "SEEDS" keeps only those seeds (two queues on two
#            cores: disjoint seeds; a queue with nothing of its own to run waits for the other's,
#            asking every POLL_S seconds, 60 by default). A run that does not finish stops it. A seed
#            whose runs so far ran on another machine class (provenance device_model) is left for a
#            machine of that class (one line each); when only such seeds are left, it stops (status 3).
#   FAMILY   fig2 | fig3 | heterogeneous (the plan file's name)
#   SEEDS    e.g. "0 1 2" (selection) or "3 4 5 6 7" (fresh)
#   CELLS    fig2/fig3: METHOD@LR ... (a method of the plan and a step size of its grid);
#            heterogeneous: ARM ... (an arm of the plan). A seed whose runs so far ran on another
#            machine class is refused before any run (status 3, one line each)
#
# Seed by seed, then cell by cell, so that the runs one seed pairs run back to back on the same
# machine in the same session (the plan's one_machine_class_per_seed). Each run goes to the plan's
# runs/ folder (fig2/fig3: <runs>/lr<LR>/<METHOD>/seed<S>; heterogeneous:
# <runs>/<data>/<setting>/lr<LR>/<METHOD>/seed<S>) through scripts/fmnist_figure.sh, which skips a
# finished or diverged run and resumes an interrupted one: stop the script and call it again.
# Every run of a family comes from one clean commit (the report refuses to judge a family whose runs
# mix commits): CODE=DIR runs the cells in DIR, a clean worktree of that commit (its own
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
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
family=${1:?FAMILY: fig2, fig3 or heterogeneous}
if [ "${2:-}" = next ]; then
  only=${3:-} previous= waiting= said=
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
    if [ -z "$todo" ]; then      # the other seeds' runs (another queue's) come first: the search needs them
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
[ -f "$plan" ] || { echo "error: FAMILY=$family: no $plan (allowed: fig2, fig3, heterogeneous); nothing run" >&2; exit 2; }

# every cell resolved before any run starts: one line per cell, "NAME|EXPERIMENT|METHOD|override ..."
resolved=$("$PY" - "$plan" "$cells" <<'PYEOF'
import sys
import yaml

def lr_name(lr: float) -> str:
    """8e-4, 1.6e-3, 2.56e-2: the folder and override spelling of the earlier rounds."""
    mantissa, exponent = f"{lr:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


plan = yaml.safe_load(open(sys.argv[1]))
runs, experiment = plan["runs"].removeprefix("results/fmnist/"), plan["experiment"]
for cell in sys.argv[2].split():
    if "arms" in plan:
        if cell not in plan["arms"]:
            sys.exit(f"error: cell {cell}: not an arm of {sys.argv[1]} (allowed: {', '.join(plan['arms'])}); nothing run")
        data, setting, method, lr = plan["arms"][cell]
        extra = plan["data"][data] + plan["settings"][setting]
        name = f"{runs}/{data}/{setting}/lr{lr_name(lr)}"
    else:
        method, _, lr_text = cell.partition("@")
        grid = plan["methods"].get(method, {}).get("grid", [])
        lr = next((g for g in grid if lr_text and abs(g - float(lr_text)) <= 1e-12 * g), None) \
            if lr_text.replace(".", "", 1).replace("e-", "", 1).isdigit() else None
        if lr is None:
            sys.exit(f"error: cell {cell}: not METHOD@LR with METHOD one of {', '.join(plan['methods'])} and LR on "
                     f"its grid in {sys.argv[1]}; nothing run")
        extra = list(plan.get("overrides", []))
        name = f"{runs}/lr{lr_name(lr)}"
    print("|".join([name, experiment, method, " ".join([f"optimizer.lr={lr_name(lr)}", *extra])]))
PYEOF
) || exit 2

iterations=$("$PY" -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['iterations'])" "$plan")
[ "${SMOKE:-0}" = 1 ] || export ITERATIONS=$iterations   # SMOKE=1: fmnist_figure.sh's seconds-long runs

for seed in $seeds; do
  [[ "$seed" =~ ^[0-9]+$ ]] || { echo "error: SEEDS: $seed is not a non-negative integer; nothing run" >&2; exit 2; }
done
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
