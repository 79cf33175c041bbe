"""Files: the one writer of every file the project writes, and a write that failed, said in a
few words (:func:`writing`, :class:`WriteFailed`, :func:`write_failure_reason`: the ``OSError``'s
errno, else the disk's free space and the file-size limit; :func:`what_to_do`: the advice its
errno calls for), and a file that cannot be read (:class:`DataFileError`).

No write follows a link or changes a file in place: every file is created new, as a temporary
file in its own directory (:func:`new_temporary`: ``O_EXCL | O_NOFOLLOW``, so it is never an
existing path, a link's target included), then renamed over its name (:func:`write_whole`); a
log that goes on is copied into such a file first (:func:`open_appending`). A rename replaces a
link or a hard link by the new file and never touches what the old name pointed at; a failed
write leaves the previous file as it was. The checks of a path before a run writes anything are
the run machinery's (:mod:`dadam3.run.paths`).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from dadam3.errors.stops import RunStopped, StoppedAtOnce


class DataFileError(RunStopped):
    """A data file (an image of the data set, a run's record read by the report or the plots)
    cannot be decoded: one line naming the file (and line), why, and what to do."""

    prefix = "error: unreadable file"

    def __init__(self, path: Any, reason: str, line: int | None = None,
                 advice: str = "the file is damaged or not what its name says: replace or remove it"):
        self.path, self.reason, self.line_number = Path(path), reason, line
        where = f"{path}" if line is None else f"{path}, line {line}"
        super().__init__(f"{where}: {reason}; {advice}")


class WriteFailed(RunStopped):
    """A file of the run could not be written (disk full, file-size limit, a directory where
    the file should be, ...): one line naming the file and the reason."""

    prefix = "error: write failed"

    def __init__(self, path: Any, reason: str, advice: str = ""):
        self.path, self.reason = Path(path), reason
        super().__init__(f"{path}: {reason}" + (f"; {advice}" if advice else ""))


def write_failure_reason(e: BaseException, path: Any) -> str:
    """Why writing ``path`` failed, in a few words. The ``OSError`` itself where there is one
    (also behind a library's own error: torch's zip writer says ``unexpected pos``, PIL
    ``_idat has no attribute fileno``, after the write failed); otherwise the file system's
    free space and the file-size limit say which it was."""
    import errno
    import resource
    cause: BaseException | None = e
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno:
            return f"{cause.strerror or os.strerror(cause.errno)} ({errno.errorcode.get(cause.errno, cause.errno)})"
        cause = cause.__cause__ or cause.__context__
    text = " ".join(str(e).split())[:120] or type(e).__name__
    place = next((a for a in (Path(path), *Path(path).absolute().parents) if a.exists()), Path("/"))
    st = os.statvfs(place)
    if st.f_bavail * st.f_frsize < 1 << 20:
        return f"No space left on device (ENOSPC; {type(e).__name__}: {text})"
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY:
        return f"the file-size limit (ulimit -f, {limit} bytes) was reached ({type(e).__name__}: {text})"
    return f"{type(e).__name__}: {text}"


@contextlib.contextmanager
def writing(path: Any) -> Iterator[None]:
    """Within it, any exception while writing ``path`` is :class:`WriteFailed` naming it (a
    library may report a failed write as any kind of exception; a whole file is written by
    :func:`write_whole`)."""
    try:
        yield
    except WriteFailed:
        raise
    except BaseException as e:
        if StoppedAtOnce.raised is not None and e is not StoppedAtOnce.raised:
            raise StoppedAtOnce.raised from None     # a second signal that a library made another error of
        if not isinstance(e, Exception):
            raise
        reason = write_failure_reason(e, path)
        raise WriteFailed(path, reason, f"{what_to_do(reason)}, then run the command again") from None


def new_temporary(path: Any) -> tuple[int, Path]:
    """(an open descriptor, its name) of a new file ``.<name>.<random>.tmp`` beside ``path``,
    created with ``O_EXCL | O_NOFOLLOW`` (never an existing file or a link's target) and the mode
    an ordinary ``open`` gives (0666 less the umask)."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:         # another's temporary (or a planted link) by that name: another name
            continue


def is_temporary_of(entry: str, names: Any) -> bool:
    """``entry`` is named as a temporary file for one of ``names``: ``.<name>.<letters, digits>.tmp``
    (:func:`new_temporary`'s, and ``mkstemp``'s of earlier versions)."""
    return any(entry.startswith(f".{name}.") and entry.endswith(".tmp")
               and entry[len(name) + 2:-4].replace("_", "").isalnum() for name in names)


def write_whole(path: Any, write: Callable[[BinaryIO], Any]) -> None:
    """``write(file)`` into a new temporary file beside ``path`` (:func:`new_temporary`), flushed
    to the disk and renamed over ``path`` only when complete: a full disk or a file-size limit
    never leaves a partial or empty file at ``path`` (PIL and matplotlib write through buffers
    whose failure can come at close), and a link or hard link at ``path`` is replaced, its target
    untouched. A failure is :class:`WriteFailed` naming ``path``, the temporary file removed,
    ``path`` as it was."""
    path = Path(path)
    with writing(path):
        fd, tmp = new_temporary(path)
        try:
            with _named(os.fdopen(fd, "wb"), tmp) as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def write_text_whole(path: Any, text: str) -> None:
    """:func:`write_whole` of ``text`` (UTF-8)."""
    write_whole(path, lambda f: f.write(text.encode("utf-8")))


def open_appending(path: Any, content: bytes | None = None) -> BinaryIO:
    """A log that goes on (``metrics.jsonl``, ``train.log``): a new file beside ``path`` holding
    ``content`` (default: what ``path`` holds now, read without following a link; nothing when
    there is none), renamed over ``path``; returned open, unbuffered, for appending. A hard-linked
    or symlinked old log is never written: the run appends to a file it created."""
    path = Path(path)
    if content is None:
        content = b""
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as old:
                if stat.S_ISREG(os.fstat(old.fileno()).st_mode):
                    content = old.read()
    with writing(path):
        fd, tmp = new_temporary(path)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)     # after a cut: at the end
        f = _named(os.fdopen(fd, "ab", buffering=0), path)
        try:
            view = memoryview(content)
            while view:
                view = view[f.write(view):]
            os.fsync(fd)
            os.replace(tmp, path)
        except BaseException:
            f.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return f


def _named(f: Any, name: Path) -> Any:
    """``f`` (opened from a descriptor: named by its number) named by its path, as ``open`` names a
    file: libraries and the one-line errors name the file by it."""
    (getattr(f, "raw", f)).name = str(name)
    return f


def what_to_do(reason: str) -> str:
    """The advice a failed write's ``reason`` (:func:`write_failure_reason`: it names the errno)
    calls for: free space only when the disk is full."""
    for code, advice in ((("ENOSPC", "EDQUOT"), "free space"), (("EFBIG",), "raise the file-size limit (ulimit -f)"),
                         (("EISDIR",), "move away the directory in the file's place"),
                         (("EACCES", "EPERM"), "fix the permissions"), (("EROFS",), "make the file system writable"),
                         (("EMFILE", "ENFILE"), "raise the open-file limit (ulimit -n)")):
        if any(f"({c}" in reason for c in code):
            return advice
    return "fix the cause"
