"""Names the tests make up: never one a user may choose (``hypercube``, ``adamw``: a user adding
that optimizer or topology would turn the suite red), and never read from a registry's order."""
import itertools
from typing import Iterable


def unused_name(*registries: Iterable[str], stem: str = "unregistered") -> str:
    """A name in none of ``registries``: ``<stem>_<n>``, the smallest such n."""
    taken = {name for registry in registries for name in registry}
    return next(name for n in itertools.count() if (name := f"{stem}_{n}") not in taken)


def allowed_names(message: str) -> set[str]:
    """The names a one-line error lists after ``allowed: `` (comma-separated, to the end or a ``;``)."""
    listed = message.rpartition("allowed: ")[2].split(";")[0]
    return {name.strip() for name in listed.split(",") if name.strip()}
