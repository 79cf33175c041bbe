"""Files: a write that failed, said in a few words (:func:`writing`, :class:`WriteFailed`,
:func:`write_failure_reason`: the ``OSError``'s errno, else the disk's free space and the
file-size limit), and a file that cannot be read (:class:`DataFileError`). The checks of a path
before a run writes anything are the run machinery's (:mod:`dadam3.run.paths`).
"""
from __future__ import annotations

import contextlib
import os
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

    def __init__(self, path: Any, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(f"{path}: {reason}")


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
        raise WriteFailed(path, write_failure_reason(e, path)) from None


def write_whole(path: Any, write: Callable[[BinaryIO], Any]) -> None:
    """``write(file)`` into a temporary file beside ``path`` (``.<name>.<pid>.tmp``), flushed to the
    disk and renamed into place only when complete: a full disk or a file-size limit never
    leaves a partial or empty file at ``path`` (PIL and matplotlib write through buffers whose
    failure can come at close). A failure is :class:`WriteFailed` naming ``path``, the temporary
    file removed, ``path`` as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with writing(path):
        try:
            with open(tmp, "wb") as f:
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
