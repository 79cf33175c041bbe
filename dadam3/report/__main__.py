"""``python -m dadam3.report [--results DIR] [--plans DIR]``: rebuild ``DIR/REPORT.md`` (default
``results``) and print the runs the analysis plans still need (``to run (family): …``).

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
    a = p.parse_args(argv)
    if not a.results.is_dir():
        print(f"error: --results={a.results}: not a directory (expected the results folder with the run "
              "directories)", file=sys.stderr)
        sys.exit(2)
    try:
        removed, queue = write(a.results, a.plans)
    except ConfigError as e:         # no runs there, or a REPORT.md the report did not write: nothing written
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    for path in removed:
        print(f"removed stale {path}")
    for line in queue:
        print(line)
    print(f"wrote {a.results / 'REPORT.md'}")
    from dadam3.report.runs import shown_grids

    grids = shown_grids((a.results / "REPORT.md").read_text(encoding="utf-8"))
    if grids:           # samples are git-ignored: what REPORT.md shows must be committed by hand
        print(f"REPORT.md shows {len(grids)} sample grids; keep them in git (git add -f): "
              + " ".join(str(a.results / g) for g in grids))


if __name__ == "__main__":
    exit_on_signals("while the report was built: REPORT.md may be incomplete; run the command again")
    main()
