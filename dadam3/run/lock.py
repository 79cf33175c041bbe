"""The run directory's lock (``.lock``): held with ``flock`` for the life of the process, so a second
live writer is refused and a killed run never leaves its directory locked.

The lock never writes into a file that was there: a ``.lock`` an earlier run left (a hard link to
it too) is opened for reading only and locked (:func:`take_lock`, during the checks, writing
nothing); once every check passed, this process's pid goes into a new file
(:func:`dadam3.errors.files.new_temporary`), locked before it is renamed over ``.lock``
(:func:`hold_lock`). Another process that locked the old file finds it is no longer ``.lock``
and tries the new one, which is held: a second writer is refused all the same. A ``.lock`` that
is no regular file (a symbolic link, a FIFO) is refused in one line, its target untouched.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import BinaryIO

from dadam3.errors.config import ConfigError
from dadam3.errors.files import new_temporary

LOCK_FILE = ".lock"


def take_lock(run_dir: Path) -> int | None:
    """The present ``.lock`` of ``run_dir``, opened for reading and locked (its descriptor; None
    when there is none). One line when another live process holds it or it is no regular file."""
    path = Path(run_dir) / LOCK_FILE
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise _not_a_lock(run_dir, path, f"a symbolic link to {os.readlink(path)}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise _not_a_lock(run_dir, path, "not a regular file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 64).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise ConfigError("hydra.run.dir", str(run_dir), f"another run (pid {pid}) is writing into this "
                                                             "directory; wait for it to end or choose another "
                                                             "directory") from None
        if _names(fd, path):
            return fd
        os.close(fd)             # replaced by its holder after we opened it: that one is the lock


def hold_lock(run_dir: Path, taken: int | None) -> BinaryIO:
    """After every check: ``.lock`` a new file holding this process's pid, locked (the open file:
    closing it lets go); ``taken`` (:func:`take_lock`'s) is closed. A process that made ``.lock``
    meanwhile is refused as a live writer."""
    path = Path(run_dir) / LOCK_FILE
    while True:
        fd, tmp = new_temporary(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _write_pid(fd, path)
            if taken is not None and _names(taken, path):
                os.replace(tmp, path)
            else:                # none was there: ours only if still none (another process may be first)
                _create_only(tmp, path)
        except FileExistsError:
            os.close(fd)
            os.unlink(tmp)
            if taken is not None:
                os.close(taken)
            taken = take_lock(run_dir)      # refused if its maker holds it
            continue
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        if taken is not None:
            os.close(taken)
        return os.fdopen(fd, "wb", buffering=0)


def _write_pid(fd: int, path: Path) -> None:
    """This process's pid into the new lock file (a failure names ``path``, the lock it was for)."""
    try:
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None


def _create_only(tmp: Path, path: Path) -> None:
    """``tmp`` renamed to ``path`` only while no ``path`` exists (a hard link, then the temporary
    name removed; a file system without hard links: a plain rename)."""
    try:
        os.link(tmp, path)
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        os.replace(tmp, path)
    else:
        os.unlink(tmp)


def _names(fd: int, path: Path) -> bool:
    """``path`` is still the file open at ``fd``."""
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    then = os.fstat(fd)
    return (then.st_dev, then.st_ino) == (now.st_dev, now.st_ino)


def _not_a_lock(run_dir: Path, path: Path, what: str) -> ConfigError:
    return ConfigError("hydra.run.dir", str(run_dir), f"{path} is {what}, not a run's lock: nothing is written "
                                                      "through it; remove it, then run the command again")
