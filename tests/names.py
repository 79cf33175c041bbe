"""Names the tests make up. A name no registry may hold (:func:`unused_name`): never one a user may
choose (``hypercube``, ``adamw``: a user adding that optimizer or topology would turn the suite red).
A name a newcomer's file registers (:func:`plausible_name`): plausible, but one the registry does not
hold yet. And never a registry's order or its first entries (:func:`allowed_names`)."""
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


def plausible_name(registry: Iterable[str], stem: str) -> str:
    """A name a user could give (``stem``), unless ``registry`` holds it: then ``<stem>_<n>``, the
    smallest n >= 2 it does not hold (a test adding one never collides with one a user added)."""
    taken = set(registry)
    return next(name for n in itertools.count(1) if (name := stem if n == 1 else f"{stem}_{n}") not in taken)
