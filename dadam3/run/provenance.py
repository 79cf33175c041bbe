"""Which code a run ran: the commit of the dadam3 checkout the package was imported from (``+dirty``
with its uncommitted changes, saved as a diff), or, for an installed package, its version; and
``unknown (<why>)`` whenever git cannot say.

Git is asked about the package's own directory only, in a clean environment (no ``GIT_DIR``,
``GIT_WORK_TREE`` or other ``GIT_*`` variable of the caller's: another repository is never read),
and only when the package's directory is the top of a dadam3 checkout: its parent holds ``.git``
and the ``pyproject.toml`` naming ``dadam3``, and ``git rev-parse --show-toplevel`` run there is that
parent (git is not let above it). A package installed elsewhere -- into a virtualenv that lies inside
some other repository (``myproj/.venv/lib/.../site-packages/dadam3``) -- is no checkout: nothing of
that repository is read, and the record says :data:`NOT_A_CHECKOUT` with the installed version
(:mod:`importlib.metadata`). A checkout git cannot answer about (git missing, failing, a checkout
of another user that git refuses, a damaged ``.git``) is recorded as ``unknown (<why>)``, never as
"not a checkout" and never as a clean commit.

The code is the package's tree (``dadam3/``): a change elsewhere in the checkout (tests, scripts,
results) is not the run's code. Its uncommitted changes go into ``code.diff``, capped at
:data:`DIFF_CAP` bytes: the files that did not fit are named at its top and in the record.
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
DIFF_CAP = 4 << 20                  # bytes of code.diff: a run's record, not a copy of a large tree
_NAME = re.compile(r'^\s*name\s*=\s*["\']dadam3["\']\s*$', re.MULTILINE)
_COMMIT = re.compile(r"[0-9a-f]{40}")


class GitCannotSay(Exception):
    """Git did not answer about the checkout: why, in a few words."""


def _git(where: Path, *args: str, ok: tuple[int, ...] = (0,), stdin: str | None = None) -> str:
    """``git ARGS`` in ``where``, with a clean environment (``PATH`` and ``HOME`` only: no variable of the
    caller's points git elsewhere), not above ``where``'s parent. --no-optional-locks: git status must not
    take the user's index lock (a run stopped mid-call would leave .git/index.lock behind)."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C",
           "GIT_CEILING_DIRECTORIES": str(where.parent.parent),
           **({"HOME": os.environ["HOME"]} if "HOME" in os.environ else {})}
    try:
        done = subprocess.run(["git", "--no-optional-locks", "-C", str(where), *args], capture_output=True,
                              timeout=30, env=env, input=None if stdin is None else stdin.encode())
    except FileNotFoundError:
        raise GitCannotSay("git is not installed or not on PATH") from None
    except subprocess.TimeoutExpired:
        raise GitCannotSay("git did not answer within 30 s") from None
    except OSError as e:
        raise GitCannotSay(f"git could not run: {e.strerror or e}") from None
    if done.returncode not in ok:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        first = said[0].removeprefix("fatal: ").removeprefix("error: ") if said else f"exit status {done.returncode}"
        if "dubious ownership" in first:
            first = "the checkout belongs to another user and git refuses it (safe.directory)"
        raise GitCannotSay(f"git: {first[:120]}")
    return done.stdout.decode("utf-8", "replace")


@lru_cache(maxsize=1)
def checkout() -> Path | str | None:
    """The dadam3 checkout the package was imported from (its top); None for an installed package
    (no ``.git`` beside a ``pyproject.toml`` naming dadam3 above it); ``unknown (<why>)`` when it
    looks like one but git cannot confirm it."""
    top = PACKAGE.parent
    try:
        project = (top / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeError):
        return None
    if not os.path.lexists(top / ".git") or not _NAME.search(project):
        return None
    try:
        said = Path(_git(PACKAGE, "rev-parse", "--show-toplevel").strip()).resolve()
    except GitCannotSay as e:
        return f"{UNKNOWN} ({e})"
    return top if said == top else f"{UNKNOWN} (git says the checkout's top is {said}, not {top})"


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
    """The checkout's commit (``+dirty`` with uncommitted changes to the package's tracked files or
    untracked files inside it), ``unknown (<why>)`` where git cannot say, or :data:`NOT_A_CHECKOUT`
    for an installed package."""
    top = checkout()
    if top is None:
        return NOT_A_CHECKOUT
    if isinstance(top, str):
        return top
    try:
        commit = _git(top, "rev-parse", "--verify", "HEAD").strip()
        if not _COMMIT.fullmatch(commit):
            return f"{UNKNOWN} (git gave {commit[:60]!r} for HEAD)"
        dirty = _git(top, "status", "--porcelain", "--untracked-files=no", "--", PACKAGE.name).strip() \
            or _untracked(top)
    except GitCannotSay as e:
        return f"{UNKNOWN} ({e})"
    return commit + (DIRTY if dirty else "")


def code_diff() -> tuple[str, list[str]] | None:
    """(the uncommitted changes of the package's tree: ``git diff HEAD`` and each untracked file inside
    it as a new file, at most :data:`DIFF_CAP` bytes; the files left out, named at its top), or None
    when git cannot say or there is no checkout."""
    top = checkout()
    if not isinstance(top, Path):
        return None
    try:
        parts = _per_file(_git(top, "diff", "HEAD", "--binary", "--", PACKAGE.name))
        for name in _untracked(top):       # git diff --no-index exits 1 when the files differ
            parts.append((name, _git(top, "diff", "--binary", "--no-index", "--", "/dev/null", name, ok=(0, 1))))
    except GitCannotSay:
        return None
    kept, left, size = [], [], 0
    for name, text in parts:
        if size + len(text.encode()) > DIFF_CAP:
            left.append(name)
            continue
        kept.append(text)
        size += len(text.encode())
    head = (f"# dadam3: left out of this diff, over its {DIFF_CAP >> 20} MiB cap: {', '.join(left)}\n"
            if left else "")
    return head + "".join(kept), left


def _per_file(diff: str) -> list[tuple[str, str]]:
    """``git diff``'s output cut into (file, its part)."""
    chunks = re.split(r"(?m)^(?=diff --git )", diff)
    return [(re.match(r"diff --git a/(\S+)", c).group(1) if c.startswith("diff --git a/") else "?", c)
            for c in chunks if c]


def code_fields() -> dict[str, str]:
    """A provenance entry's code fields: ``code_commit`` and, where it is no commit (an installed
    package, or ``unknown (<why>)``), ``code_version`` (the installed version)."""
    commit = code_commit()
    return {"code_commit": commit, **({} if _COMMIT.match(commit) else {"code_version": installed_version()})}


def commits_known(commits: set[str]) -> set[str] | None:
    """Of ``commits`` (40 hex digits each), those this checkout's repository holds; None when it cannot
    say (no checkout, git cannot answer, or a shallow clone: its history is cut)."""
    top = checkout()
    if not isinstance(top, Path) or not commits:
        return None if not isinstance(top, Path) else set()
    try:
        if _git(top, "rev-parse", "--is-shallow-repository").strip() == "true":
            return None
        out = _git(top, "cat-file", "--batch-check", stdin="".join(f"{c}^{{commit}}\n" for c in sorted(commits)))
    except GitCannotSay:
        return None
    present = {f[0] for f in map(str.split, out.splitlines()) if len(f) >= 2 and f[1] == "commit"}
    return {c for c in commits if c in present}
