"""What a run writes into its directory, listed in its manifest (``<run_dir>/manifest.txt``), so
that ``overwrite=true`` deletes exactly that (:mod:`dadam3.run.directory`).

When a run claims its directory it lists there every top-level name it will create (its log,
checkpoints, samples, ...; :func:`train_writes`), before it creates any; a resume adds what it
writes. A directory holds a run when it has such a manifest or, for a run of an earlier version,
its ``run_id`` or a log (:data:`LOGS`): :func:`run_files`.

Once the run has written them (its start's files, each checkpoint, the synthetic runner's
results) it stamps each name it writes with what it holds: size and SHA-256
(:func:`stamp_manifest`, :mod:`dadam3.run.stamps`), so a copy of the run matches its stamps and an
edited or replaced file does not. ``overwrite=true`` deletes a name only while it still matches
its stamp (:func:`deletable`); a name without a stamp (a run killed before its first stamp, a
manifest of an earlier version) only when it is a name a run writes (:data:`RUN_FILES`, ``also``).
Anything else the manifest lists (a name a user added to it, a file put in the place of the run's)
is kept. The manifest is read small (:func:`dadam3.errors.small_files.read_small_text`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from dadam3.errors.config import ConfigError
from dadam3.errors.files import DataFileError, WriteFailed, write_text_whole
from dadam3.errors.small_files import read_small, read_small_text
from dadam3.run.checkpoint import CHECKPOINT_DIR, RUN_ID_FILE, read_run_id
from dadam3.run.lock import LOCK_FILE
from dadam3.run.stamps import matches, stamp

# the names a training run writes (.hydra/ and train.log too: the run writes them once it holds the
# directory); what overwrite=true deletes of a run written before manifests
RUN_FILES = ("metrics.jsonl", CHECKPOINT_DIR, "samples", "images", "config_resolved.yaml", "provenance.json", "wandb",
             RUN_ID_FILE, ".hydra", "train.log", "code.diff")
RUN_DIRS = (CHECKPOINT_DIR, "samples", "images", "wandb", ".hydra")     # of RUN_FILES, the directories
LOGS = ("metrics.jsonl", "metrics.csv", "status.json")     # a run's log: a training's, a synthetic run's
GROWING = ("metrics.jsonl", "train.log", "synthetic.log")     # logs appended to after the run's last stamp
MANIFEST = "manifest.txt"       # <run_dir>/manifest.txt: the top-level names the run writes, one a line
MANIFEST_HEADER = "# what this run writes here (dadam3): overwrite=true deletes these names and nothing else\n"


def train_writes(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The top-level names a training run of ``config`` (nested, as ``TrainConfig.config``)
    creates in its directory: ``wandb/`` only with ``logger.kind=wandb``, ``images/`` (the
    logged sample grids) only for image data."""
    logger, dataset = config.get("logger") or {}, config.get("dataset") or {}
    return tuple(name for name in RUN_FILES if (name != "wandb" or logger.get("kind") == "wandb")
                 and (name != "images" or dataset.get("name") != "gaussians"))


def read_manifest(run_dir: Path) -> tuple[str, ...] | None:
    """The names ``run_dir``'s manifest lists (plain names in ``run_dir``: a line naming a path
    elsewhere, ``..``, the lock or the manifest is ignored), or None without one (no file, not
    readable, or not starting with :data:`MANIFEST_HEADER`: a file of that name no run wrote)."""
    stamps = read_stamps(run_dir)
    return None if stamps is None else tuple(n for n in stamps if "/" not in n)


def manifest_bytes(run_dir: Path) -> bytes | None:
    """The manifest as it is, read small (None: there is none yet): what an undone start writes back."""
    try:
        return read_small(Path(run_dir) / MANIFEST)
    except FileNotFoundError:
        return None


def read_stamps(run_dir: Path) -> dict[str, str | None] | None:
    """:func:`read_manifest`'s names, each with its stamp (None: not stamped)."""
    try:
        text = read_small_text(Path(run_dir) / MANIFEST)
    except (OSError, DataFileError):
        return None
    if not text.startswith(MANIFEST_HEADER):        # a file of that name that no run wrote
        return None
    out: dict[str, str | None] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, _, mark = line.partition("\t")
        name = name.strip()
        if _inside(name):
            out[name] = mark.strip() or out.get(name)
    return out


def _inside(name: str) -> bool:
    """A manifest's line names a path inside the run's directory: a top-level name, or
    ``folder/file`` below one (no ``..``, not the lock or the manifest)."""
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and all(p not in ("", ".", "..") for p in parts) \
        and parts[0] not in (MANIFEST, LOCK_FILE)


def _below(run_dir: Path, name: str) -> list[str]:
    """The paths below ``name`` (a folder of the run; links not followed), deepest first."""
    path = Path(run_dir) / name
    if not path.is_dir() or path.is_symlink():
        return []
    try:
        entries = sorted(os.listdir(path))
    except OSError:
        return []
    return [p for e in entries for p in (*_below(run_dir, f"{name}/{e}"), f"{name}/{e}")]


def stamp_manifest(run_dir: Path, writes: Sequence[str]) -> None:
    """Stamp (:func:`stamp`) each name of ``writes`` (what this run writes) that the manifest lists
    and that exists now; the other lines stay as they are. Nothing without a manifest."""
    stamps = read_stamps(run_dir)
    if stamps is None:
        return
    since = _claimed(run_dir)
    for name in writes:
        if name in stamps:
            stamps[name] = stamp(Path(run_dir) / name, growing=name in GROWING) or stamps[name]
            below = _below(run_dir, name)
            for rel in [r for r in stamps if r.startswith(name + "/") and r not in below]:
                del stamps[rel]         # gone (a checkpoint replaced)
            for rel in below:           # in its folders: what it wrote since it claimed the directory
                if since is None or os.lstat(Path(run_dir) / rel).st_mtime_ns >= since:
                    stamps[rel] = stamp(Path(run_dir) / rel) or stamps.get(rel)
    try:
        write_manifest(run_dir, list(stamps), stamps)
    except WriteFailed:     # a full disk: the earlier stamps stay, and what they no longer match is kept, not deleted
        pass


def deletable(run_dir: Path, names: Sequence[str], writes: Sequence[str] = ()) -> tuple[tuple[str, ...], ...]:
    """(the names of ``names`` that ``overwrite=true`` may delete, those it keeps): a stamped name
    while it is still the stamped entry; one without a stamp when it is a name a run writes
    (:data:`RUN_FILES`, ``writes``). A kept name the new run writes (``writes``) is refused in one line."""
    stamps = read_stamps(run_dir) or {}
    ok = [n for n in names if (matches(Path(run_dir) / n, stamps[n]) if stamps.get(n) else n in (*RUN_FILES, *writes))]
    kept = [n for n in names if n not in ok]
    if any(n in writes for n in kept):
        raise ConfigError("overwrite", True, f"{', '.join(n for n in kept if n in writes)} in {run_dir} is no longer "
                                             f"what the old run wrote (replaced since; its {MANIFEST} says what it "
                                             "wrote): move it away yourself; nothing was deleted")
    out: list[str] = []
    for name in ok:         # a folder: what the run wrote in it, then the folder if that left it empty
        left: set[str] = set()
        for rel in _below(run_dir, name):
            mine = matches(Path(run_dir) / rel, stamps.get(rel)) if stamps.get(name) else True   # unstamped: earlier
            is_dir = (Path(run_dir) / rel).is_dir() and not (Path(run_dir) / rel).is_symlink()
            if not mine and not is_dir and stamps.get(rel):     # the run's file, replaced: the new run writes it
                raise ConfigError("overwrite", True, f"{rel} in {run_dir} is no longer what the old run wrote "
                                                     f"(replaced since; its {MANIFEST} says what it wrote): move it "
                                                     "away yourself; nothing was deleted")
            if (not mine and not is_dir) or (is_dir and any(x.startswith(rel + "/") for x in left)):
                left.add(rel)
            else:
                out.append(rel)
        if left:
            files = sorted(x for x in left if not any(y.startswith(x + "/") for y in left))
            kept.append(f"{name}/ (not empty: {', '.join(files)})")
        else:
            out.append(name)
    return tuple(out), tuple(kept)


_CLAIMED: dict[str, int] = {}      # run directory -> its manifest's mtime when this process first wrote it


def _claimed(run_dir: Path) -> int | None:
    """When this process claimed ``run_dir`` (its first manifest write, on the file system's clock):
    a file in a run's folder is stamped as the run's only if it changed since (a user's file put
    there before a resume is not). None in a process that did not claim it."""
    return _CLAIMED.get(os.path.realpath(run_dir))


def write_manifest(run_dir: Path, names: Sequence[str], stamps: Mapping[str, str | None] | None = None) -> None:
    """``run_dir``/:data:`MANIFEST` listing ``names`` (each with its stamp in ``stamps``), replaced
    whole (a temporary file renamed)."""
    target = Path(run_dir) / MANIFEST
    stamps = stamps or {}
    names = [*names, *(n for n in stamps if n.split("/")[0] in names and "/" in n)]   # what its folders hold
    write_text_whole(target, MANIFEST_HEADER + "".join(f"{n}\t{stamps[n]}\n" if stamps.get(n) else f"{n}\n"
                                                       for n in dict.fromkeys(names)))
    _CLAIMED.setdefault(os.path.realpath(run_dir), os.stat(target).st_mtime_ns)


def run_files(run_dir: Path, writes: Sequence[str] = RUN_FILES) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """(the names a run writes that are in ``run_dir`` (``writes``, :data:`RUN_FILES` and what its
    manifest lists), the names of them its run wrote): the latter are its manifest's, or for a
    run of an earlier version (no manifest, but its ``run_id`` or a log, :data:`LOGS`) all of
    the former; None when the directory holds no run."""
    listed = read_manifest(run_dir)
    names = dict.fromkeys((*writes, *RUN_FILES, *(listed or ())))
    present = tuple(n for n in names if os.path.lexists(run_dir / n))
    if listed is not None:
        return present, tuple(n for n in present if n in listed)
    if read_run_id(run_dir) is not None or any((run_dir / log).is_file() for log in LOGS):
        return present, present
    return present, None
