"""``python -m dadam3.report [--results DIR]``: rebuild ``DIR/REPORT.md`` (default ``results``)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dadam3.errors import ConfigError
from dadam3.report.build import write


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m dadam3.report", description=__doc__)
    p.add_argument("--results", type=Path, default=Path("results"), help="the results folder (default: results)")
    a = p.parse_args(argv)
    if not a.results.is_dir():
        print(f"error: --results={a.results}: not a directory (expected the results folder with the run "
              "directories)", file=sys.stderr)
        sys.exit(2)
    try:
        removed = write(a.results)
    except ConfigError as e:         # no runs there, or a REPORT.md the report did not write: nothing written
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    for path in removed:
        print(f"removed stale {path}")
    print(f"wrote {a.results / 'REPORT.md'}")


if __name__ == "__main__":
    main()
