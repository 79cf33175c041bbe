"""Which code a run ran: the commit of the dadam3 checkout the package was imported from (``+dirty``
with its uncommitted changes, saved as a diff), or, for an installed package, its version.

Git is asked only when the package's directory is the top of a dadam3 checkout: ``git rev-parse
--show-toplevel`` run there is the package's parent, which holds the ``pyproject.toml`` naming
``dadam3``. A package installed into a virtualenv that lies inside some other repository
(``myproj/.venv/lib/.../site-packages/dadam3``) is no checkout: git would walk up to ``myproj``
and record its commit and its uncommitted changes (a user's secrets) in the run directory, so
nothing of that repository is read and the record says :data:`NOT_A_CHECKOUT` with the installed
version (:mod:`importlib.metadata`).
"""
from __future__ import annotations

import os
import re
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]       # .../dadam3
DIRTY = "+dirty"
UNKNOWN = "unknown"
NOT_A_CHECKOUT = "not a checkout"
# the code is the checkout less its results: a run that rewrites a committed run there (make fig1) is not dirty code
NOT_RESULTS = ("--", ":(top,exclude)results")
_NAME = re.compile(r'^\s*name\s*=\s*["\']dadam3["\']\s*$', re.MULTILINE)


def _git(where: Path, *args: str, ok: tuple[int, ...] = (0,)) -> str:
    """``git ARGS`` in ``where``. --no-optional-locks: git status must not take the user's index lock
    (a run stopped mid-call would leave .git/index.lock behind)."""
    done = subprocess.run(["git", "--no-optional-locks", "-C", str(where), *args], capture_output=True, timeout=10,
                          env={**os.environ, "GIT_CEILING_DIRECTORIES": str(where.parent.parent)})
    if done.returncode not in ok:
        raise subprocess.CalledProcessError(done.returncode, "git")
    return done.stdout.decode("utf-8", "replace")


@lru_cache(maxsize=1)
def checkout() -> Path | None:
    """The dadam3 checkout the package was imported from (its top), or None: the package's parent
    must be git's top-level directory and hold a ``pyproject.toml`` whose project is dadam3."""
    top = PACKAGE.parent
    try:
        said = Path(_git(PACKAGE, "rev-parse", "--show-toplevel").strip()).resolve()
        project = (top / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeError, subprocess.SubprocessError):
        return None
    return top if said == top and _NAME.search(project) else None


def installed_version() -> str:
    """The installed distribution's version of dadam3, or "unknown"."""
    try:
        return metadata.version("dadam3")
    except metadata.PackageNotFoundError:
        return UNKNOWN


def _untracked(top: Path) -> list[str]:
    """Files inside the package that git does not track (a new module): they change the code too."""
    out = _git(top, "ls-files", "--others", "--exclude-standard", "-z", "--", PACKAGE.name)
    return [p for p in out.split("\0") if p]


def code_commit() -> str:
    """The checkout's commit (``+dirty`` with uncommitted changes to tracked files outside
    ``results/``, or untracked files inside the package), "unknown" where git cannot say, or
    :data:`NOT_A_CHECKOUT` for an installed package."""
    top = checkout()
    if top is None:
        return NOT_A_CHECKOUT
    try:
        commit = _git(top, "rev-parse", "HEAD").strip()
        dirty = _git(top, "status", "--porcelain", "--untracked-files=no", *NOT_RESULTS).strip() or _untracked(top)
        return commit + (DIRTY if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN


def code_diff() -> str | None:
    """The uncommitted changes of the checkout's code: ``git diff HEAD`` (``results/`` left out) and
    each untracked file inside the package as a new file; None when git cannot say or no checkout."""
    top = checkout()
    if top is None:
        return None
    try:
        diff = _git(top, "diff", "HEAD", "--binary", *NOT_RESULTS)
        for name in _untracked(top):       # git diff --no-index exits 1 when the files differ
            diff += _git(top, "diff", "--binary", "--no-index", "--", "/dev/null", name, ok=(0, 1))
        return diff
    except (OSError, subprocess.SubprocessError):
        return None


def code_fields() -> dict[str, str]:
    """A provenance entry's code fields: ``code_commit`` and, for an installed package,
    ``code_version`` (its installed version)."""
    commit = code_commit()
    return {"code_commit": commit, **({"code_version": installed_version()} if commit == NOT_A_CHECKOUT else {})}
