"""``python -m dadam3.report [--results DIR] [--plans DIR]``: rebuild ``DIR/REPORT.md`` (default
``results``) and print the runs the analysis plans still need (``to run (family): …``).

``--next FAMILY`` writes nothing: it prints the runs that family's plan needs next, one line a seed,
``SEED CELL ...`` (the cells as ``experiments/evidence_round3.sh`` takes them; the selection first,
then, once a step size is chosen, the fresh seeds at it), and nothing when the family is complete. A seed
whose runs so far ran on another machine class (provenance ``device_model``) is left out, named on stderr,
and the exit status is 3: a run of it here would mix classes within the seed. ``--here FAMILY SEED ...``
writes nothing either: the same line for each SEED whose runs so far ran on another class, and status 3.

A damaged or hand-edited file of a run is one line naming it (:mod:`dadam3.report.read`); every
environmental failure and signal too (the boundary: :func:`dadam3.errors.boundary.exit_on_failure`)."""
from __future__ import annotations

import sys
from pathlib import Path

from dadam3.errors.boundary import exit_on_failure
from dadam3.errors.config import ConfigError
from dadam3.report.plan import PLAN_DIR
from dadam3.run.paths import ArgumentParser, path_argument
from dadam3.run.signals import exit_on_signals


@exit_on_failure
def main(argv=None) -> None:
    from dadam3.report.build import write

    p = ArgumentParser(prog="python -m dadam3.report", description=__doc__)
    p.add_argument("--results", type=path_argument("--results"), default=Path("results"),
                   help="the results folder (default: results)")
    p.add_argument("--plans", type=path_argument("--plans"), default=PLAN_DIR,
                   help="the folder of the analysis plans (default: the checkout's docs/analysis_plan)")
    p.add_argument("--next", metavar="FAMILY", help="print the runs FAMILY's plan needs next and write nothing")
    p.add_argument("--here", nargs="+", metavar=("FAMILY", "SEED"), type=str,
                   help="status 3, with one line each, when a SEED's runs of FAMILY so far ran on another machine "
                        "class; write nothing")
    a = p.parse_args(argv)
    if not a.results.is_dir():
        print(f"error: --results={a.results}: not a directory (expected the results folder with the run "
              "directories)", file=sys.stderr)
        sys.exit(2)
    try:
        if a.next is not None:
            return print_next(a.results, a.plans, a.next)
        if a.here is not None:
            return check_here(a.results, a.plans, a.here[0], a.here[1:])
        removed, kept, queue = write(a.results, a.plans)
    except ConfigError as e:         # no runs there, a damaged run, or a REPORT.md the report did not write
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    for path in removed:
        print(f"removed stale {path}")
    if kept:
        print(f"warning: kept {len(kept)} file(s) the report's manifest lists but it may not delete: "
              + "; ".join(kept), file=sys.stderr)
    for line in queue:
        print(line)
    print(f"wrote {a.results / 'REPORT.md'}")
    from dadam3.report.runs import shown_grids

    grids = shown_grids((a.results / "REPORT.md").read_text(encoding="utf-8"))
    if grids:           # samples are git-ignored: what REPORT.md shows must be committed by hand
        print(f"REPORT.md shows {len(grids)} sample grids; keep them in git (git add -f): "
              + " ".join(str(a.results / g) for g in grids))


def family_here(results: Path, plan_dir: Path, family: str, option: str):
    """``family``'s runs and plan (:func:`dadam3.report.families.build`) and this machine's class."""
    from dadam3.report import families, plan
    from dadam3.report.runs import one_snapshot
    from dadam3.run.job_log import device_model

    plans = {p.family: p for p in plan.load_all(plan_dir)}
    if family not in plans:
        raise ConfigError(option, family, f"no such plan in {plan_dir} (allowed: {', '.join(sorted(plans))})")
    with one_snapshot(plans.values()):
        fam = families.build(results, plans[family])
    devices = {s.get("device", "cpu") for r in fam.runs for s in r.provenance} or {"cpu"}
    return fam, device_model(devices.pop() if len(devices) == 1 else "cpu")


def say_held(family: str, elsewhere: dict, here: str, cells: dict) -> None:
    """One line on stderr for each seed bound to another class, and the exit status 3 if any."""
    for seed, classes in elsewhere.items():
        named = f": {' '.join(cells[seed])}" if cells.get(seed) else ""
        print(f"{family}: seed {seed} left for a machine of class {' and '.join(map(repr, classes))}, where its "
              f"runs so far ran (this machine: {here!r}; the plan's one_machine_class_per_seed){named}",
              file=sys.stderr)
    if elsewhere:
        sys.exit(3)


def print_next(results: Path, plan_dir: Path, family: str) -> None:
    """``SEED CELL ...`` for each seed with runs to make or resume in ``family`` on this machine; a seed
    whose runs so far ran on another machine class is one line on stderr instead, and the exit status 3."""
    from dadam3.report.environments import bound_elsewhere

    fam, here = family_here(results, plan_dir, family, "--next")
    elsewhere = bound_elsewhere(fam.units, fam.todo, here)
    for seed, cells in fam.todo.items():
        if seed not in elsewhere:
            print(seed, *cells)
    say_held(family, elsewhere, here, fam.todo)


def check_here(results: Path, plan_dir: Path, family: str, seeds: list[str]) -> None:
    """Status 3, one line each, for the ``seeds`` whose runs of ``family`` so far ran on another machine
    class (``experiments/evidence_round3.sh``'s explicit cells ask before any run)."""
    from dadam3.report.environments import bound_elsewhere

    wrong = [x for x in seeds if not x.isdigit()]
    if not seeds or wrong:
        raise ConfigError("--here", " ".join(wrong) or family, "FAMILY SEED ...: one or more non-negative integers")
    fam, here = family_here(results, plan_dir, family, "--here")
    say_held(family, bound_elsewhere(fam.units, {int(x): [] for x in seeds}, here), here, {})


if __name__ == "__main__":
    exit_on_signals("while the report was built: REPORT.md may be incomplete; run the command again")
    main()
