"""Paths a run or a command will write into, checked before anything is written (the run
contract): a directory it can write into or create (:func:`check_usable_dir`), a file it can
write (:func:`check_writable_file`), and no symbolic link where it writes: neither the directory
itself nor a folder it writes into below it (:func:`check_no_link`). Each refusal is one
:class:`~dadam3.errors.config.ConfigError` naming the key and the path; nothing is created.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from dadam3.errors.config import ConfigError

NAME_MAX, PATH_MAX = 255, 4096          # Linux's, where the file system cannot say


HYDRA_NO_TILDE = ("Hydra does not expand ~ (the run would write into a directory named ~ here): give the path "
                  "from /, e.g. $HOME/...")


def check_usable_dir(key: str, path: Any) -> Path:
    """``path`` as a directory this process can write into: an existing writable directory, or
    one it could create (its nearest existing ancestor is a writable directory, and no link to a
    missing target lies on the way). Creates nothing."""
    p = Path(os.path.expanduser(str(path)))
    dangling = next((a for a in (p.absolute(), *p.absolute().parents) if not a.exists() and a.is_symlink()), None)
    if dangling is not None:
        raise ConfigError(key, str(path), f"{dangling} is a link to {os.readlink(dangling)}, which does not exist: "
                                          "create its target or choose another directory")
    if p.exists():
        if not p.is_dir():
            raise ConfigError(key, str(path), "exists and is not a directory; choose a directory path")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ConfigError(key, str(path), "is not writable by this user; choose another directory")
        return p
    ancestor = next(a for a in p.absolute().parents if a.exists())
    if not ancestor.is_dir():
        raise ConfigError(key, str(path), f"cannot be created: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(key, str(path), f"cannot be created: {ancestor} is not writable by this user")
    return p


def check_no_link(key: str, value: Any, path: Any, below: bool = False) -> None:
    """``path`` (a directory a run or the report writes into, or a file it writes there) is not a
    symbolic link, and with ``below`` no folder under it is one: whatever is written there would
    land in the link's target, outside the run. One line naming the link and its target."""
    path = Path(path)
    links = [path] if path.is_symlink() else []
    if below and not links and path.is_dir():
        links = [Path(d) / n for d, names, _ in os.walk(path) for n in names if (Path(d) / n).is_symlink()][:1]
    if links:
        raise ConfigError(key, str(value), f"{links[0]} is a symbolic link to {os.readlink(links[0])}: nothing is "
                                           "written through a link; use the real path, or replace the link")


def check_writable_file(key: str, path: Any) -> Path:
    """``path`` as a file this process can write (its directory usable, see
    :func:`check_usable_dir`; an existing ``path`` a writable file). Creates nothing."""
    p = Path(os.path.expanduser(str(path)))
    if p.is_dir():
        raise ConfigError(key, str(path), "is a directory; give a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(key, str(path), "exists and is not writable by this user")
    try:
        check_usable_dir(key, p.parent)
    except ConfigError as e:
        raise ConfigError(key, str(path), f"its directory {e.template}", e.refs) from None
    return p


def check_path(key: str, value: str | os.PathLike) -> Path:
    """``value`` as a path the OS can create: no empty name, no NUL, newline or carriage return
    (they break the run's one-line records and the shell commands it prints), each component at
    most ``NAME_MAX`` bytes and the whole at most ``PATH_MAX`` (of the nearest existing
    directory's file system). A one-line ConfigError naming ``key`` otherwise."""
    text = os.fspath(value)
    if not text.strip():
        raise ConfigError(key, text, "is empty (it would write into the current directory); name a directory "
                                      "or file")
    bad = next((c for c in ("\0", "\n", "\r") if c in text), None)
    if bad is not None:
        raise ConfigError(key, text.replace(bad, repr(bad)[1:-1]), f"holds the character {bad!r}, which a path of "
                                                                   "a run may not hold; choose another name")
    path = Path(os.path.abspath(os.path.expanduser(text)))
    anchor = path
    while not _exists(anchor) and anchor != anchor.parent:
        anchor = anchor.parent
    name_max, path_max = _limit(anchor, "PC_NAME_MAX", NAME_MAX), _limit(anchor, "PC_PATH_MAX", PATH_MAX)
    long_name = next((part for part in path.parts if len(os.fsencode(part)) > name_max), None)
    if long_name is not None:
        raise ConfigError(key, _short(text), f"the name {_short(long_name)} is {len(os.fsencode(long_name))} bytes "
                                             f"long; this file system allows at most {name_max} per name")
    if len(os.fsencode(str(path))) >= path_max:
        raise ConfigError(key, _short(text), f"the path is {len(os.fsencode(str(path)))} bytes long; at most "
                                             f"{path_max - 1} are allowed")
    return Path(text)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose refusal is one line (``error: argument --flag: why``, exit status 2)
    instead of its usage text and the message."""

    def error(self, message: str):
        sys.stderr.write(f"error: {message}\n")
        sys.exit(2)


def path_argument(flag: str):
    """An argparse ``type`` that checks a path with :func:`check_path` (the error names ``flag``)."""
    def parse(text: str) -> Path:
        try:
            return check_path(flag, text)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(e.allowed) from None
    parse.__name__ = "path"
    return parse


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:            # a name too long to ask about
        return False


def _limit(anchor: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(anchor, name)
    except (OSError, ValueError):
        return default


def _short(text: str, keep: int = 60) -> str:
    return text if len(text) <= keep else f"{text[:keep]}...({len(text)} characters)"
