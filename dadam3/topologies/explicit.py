"""A user-given W: inline rows or a file."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np

from dadam3.errors.config import ConfigError
from dadam3.topologies.checks import check_nodes, make_doubly_stochastic, validate
from dadam3.topologies.registry import topology


def matrix_rows(key: str, value: Any) -> list | None:
    """Null or a non-empty list of non-empty lists of numbers (a matrix's rows); :func:`explicit`
    checks its shape and that it mixes."""
    if value is None:
        return None
    rows_ok = isinstance(value, (list, tuple)) and value and all(isinstance(r, (list, tuple)) and r for r in value)
    if not rows_ok or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for r in value for x in r):
        raise ConfigError(key, value, "must be a list of rows of numbers, e.g. [[0.5,0.5],[0.5,0.5]]")
    return [list(r) for r in value]


def path_text(key: str, value: Any) -> str | None:
    """A path or null (a number is read as its digits, as OmegaConf does)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if value is not None and not isinstance(value, str):
        raise ConfigError(key, value, "must be a string")
    return value


@topology("explicit", given=True)
def explicit(nodes: int, matrix: Annotated[Any, matrix_rows] = None, file: Annotated[Any, path_text] = None,
             require_symmetric: bool = True) -> np.ndarray:
    """A user-given W: inline (``matrix``, a list of rows) or from a .npy / .csv / .txt
    ``file`` (whitespace- or comma-separated rows), ``M x M``; validated as a mixing matrix
    (symmetric unless ``require_symmetric`` is false: the paper's theory assumes an undirected
    graph), every error naming the option given."""
    M = check_nodes(nodes)
    if (matrix is None) == (file is None):
        raise ConfigError("matrix", matrix, "give exactly one of {matrix=} (a list of rows) or {file=}",
                          {"matrix": matrix, "file": file})
    if file is not None:
        W, key = read_matrix(file), "file"
    else:
        try:
            W = np.asarray(matrix, dtype=float)
        except (TypeError, ValueError):
            raise ConfigError("matrix", matrix, "must be a list of numeric rows") from None
        key = "matrix"
    if W.ndim != 2:
        raise ConfigError(key, f"array of shape {W.shape}", "must be a 2-D square matrix")
    if W.shape[0] != M:
        raise ConfigError(key, f"{W.shape[0]}x{W.shape[1]} matrix", f"must be {M}x{M} ({{nodes}})", {"nodes": M})
    validate(W, key, symmetric=require_symmetric)
    return make_doubly_stochastic(W, key, symmetric=require_symmetric)


def read_matrix(file: str) -> np.ndarray:
    """The matrix in a .npy file, or in a .csv / .txt file of whitespace- or comma-separated rows."""
    path = Path(file).expanduser()
    if not path.is_file():
        raise ConfigError("file", file, "no such file (.npy, .csv or .txt matrix)")
    try:
        if path.suffix == ".npy":
            return np.asarray(np.load(path, allow_pickle=False), dtype=float)
        return np.loadtxt(path.read_text().replace(",", " ").splitlines(), ndmin=2)
    except (ValueError, OSError, UnicodeDecodeError, EOFError) as e:
        raise ConfigError("file", file, f"not a numeric matrix (.npy, or .csv/.txt rows of "
                                        f"numbers): {' '.join(str(e).split())[:200]}") from None
