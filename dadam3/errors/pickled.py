"""Errors that survive ``pickle`` whatever their ``__init__`` takes: a refusal raised on one rank is
sent to the others (``torch.distributed``'s object collectives pickle it), a sweep's job process
hands its failure back to the launcher. Python rebuilds an exception as ``cls(*args)``, which fails
for an ``__init__`` with other arguments (``ConfigError(key, value, allowed)``: a 43-line traceback
from rank 1 instead of the one line). :class:`Picklable` rebuilds it from its args and attributes
without calling ``__init__``."""
from __future__ import annotations

from typing import Any


class Picklable:
    """Mixin for exceptions: pickled as (class, args, attributes)."""

    def __reduce__(self):
        return _rebuilt, (type(self), self.args, dict(self.__dict__))


def _rebuilt(cls: type, args: tuple, state: dict[str, Any]) -> BaseException:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error
