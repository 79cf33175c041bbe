"""IDX files, the format of MNIST and Fashion-MNIST, read and written without torchvision.

An IDX file is a 4-byte magic ``00 00 08 <ndim>`` (``08``: unsigned bytes), ``ndim``
big-endian uint32 sizes, then the values in row-major order. The releases ship them
gzip-compressed (``train-images-idx3-ubyte.gz`` …). torchvision's reader takes only the
uncompressed files, so :func:`read_idx` reads either form where it lies, which lets a
read-only directory (e.g. Debian's ``/usr/share/datasets/fashion-mnist``) be used as is.
"""
from __future__ import annotations

import gzip
import io
import struct
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from dadam3.errors.files import write_whole

UBYTE = 0x08


class IdxError(ValueError):
    """The bytes are not a uint8 IDX file of the expected rank (message says why, one line)."""


def find_idx_files(folder: Path, names: list[str]) -> list[Path] | None:
    """``folder/name`` (or ``name.gz``) for every name, or ``None`` if any is missing."""
    found = []
    for name in names:
        path = next((p for p in (folder / name, folder / f"{name}.gz") if p.is_file()), None)
        if path is None:
            return None
        found.append(path)
    return found


def read_idx(path: str | Path, ndim: int | None = None) -> Tensor:
    """The uint8 tensor stored in the IDX file ``path`` (gzip-compressed when it ends in ``.gz``).

    Args:
        path: the file.
        ndim: the rank it must have (1 for labels, 3 for images); ``None`` accepts any.

    Raises:
        OSError: the file cannot be read or is not valid gzip (``gzip.BadGzipFile``).
        IdxError: bad magic, wrong rank or a size that does not match the data.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except EOFError as e:       # truncated gzip stream
        raise IdxError(f"{path}: truncated ({e})") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != UBYTE:
        raise IdxError(f"{path}: not a uint8 IDX file (magic {data[:4].hex() or 'missing'}, "
                       f"expected 000008<ndim>)")
    rank = data[3]
    if ndim is not None and rank != ndim:
        raise IdxError(f"{path}: IDX rank {rank}, expected {ndim}")
    header = 4 + 4 * rank
    if len(data) < header:
        raise IdxError(f"{path}: truncated header")
    shape = struct.unpack(f">{rank}I", data[4:header])
    if len(data) - header != int(np.prod(shape, dtype=np.int64)):
        raise IdxError(f"{path}: header says {'x'.join(map(str, shape))} values, "
                       f"file holds {len(data) - header}")
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8, offset=header).copy()).view(*shape)


def write_idx(path: str | Path, values: Tensor | np.ndarray) -> None:
    """Write uint8 ``values`` as an IDX file; gzip-compressed when ``path`` ends in ``.gz``.

    The gzip header carries no file name and time stamp 0, so the same values always give
    the same bytes.
    """
    a = np.ascontiguousarray(values.numpy() if isinstance(values, Tensor) else values)
    if a.dtype != np.uint8 or not 1 <= a.ndim <= 255:
        raise ValueError(f"write_idx: expected a uint8 array of rank >= 1, got {a.dtype} {a.shape}")
    blob = bytes([0, 0, UBYTE, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape) + a.tobytes()
    path = Path(path)
    if path.suffix == ".gz":
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as f:
            f.write(blob)
        blob = buf.getvalue()
    write_whole(path, lambda f: f.write(blob))
