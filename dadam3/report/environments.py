"""The environment rules of a plan's family (:mod:`dadam3.report.families`): every run from one clean
code commit, and each seed's runs on one machine class (provenance ``device_model``)."""
from __future__ import annotations

from dadam3.report.runs import UNKNOWN, Run
from dadam3.report.validate import CLEAN_COMMIT


def _commit(run: Run) -> str:
    return ", ".join(sorted({str(s.get("code_commit", UNKNOWN)) for s in run.provenance})) or UNKNOWN


def commits_text(runs: list[Run]) -> str:
    return ", ".join(sorted({_commit(r)[:12] + ("+dirty" if _commit(r).endswith("+dirty") else "")
                             for r in runs})) or "–"


def machine_class(run: Run) -> str:
    return run.provenance_field("device_model")


def environment(runs: list[tuple[str, Run]]) -> str:
    """"" when every run is from one clean commit and each seed on one machine class; else what mixes."""
    problems = []
    commits: dict[str, int] = {}
    for _, r in runs:
        commits[_commit(r)] = commits.get(_commit(r), 0) + 1
    if len(commits) > 1 or any(not CLEAN_COMMIT.fullmatch(c) for c in commits):      # dirty, unknown, not a checkout
        problems.append("commits " + ", ".join(f"{c[:12]}{'+dirty' if c.endswith('+dirty') else ''} ({n} runs)"
                                               for c, n in sorted(commits.items())))
    by_seed: dict = {}
    for unit, r in runs:
        by_seed.setdefault(r.seed, {}).setdefault(machine_class(r), []).append(unit)
    for seed, classes in sorted(by_seed.items(), key=lambda kv: str(kv[0])):
        if len(classes) > 1:
            problems.append(f"seed {seed} on " + ", ".join(f"{c} ({', '.join(sorted(set(u)))})"
                                                           for c, u in sorted(classes.items())))
    return "; ".join(problems)


def bound_elsewhere(units: dict, todo: dict, here: str) -> dict[int, list[str]]:
    """The seeds of ``todo`` whose runs so far (``units``: unit -> {seed: Run}) ran on a machine class
    other than ``here``, each with those classes: a run of theirs made here would break the plan's
    one_machine_class_per_seed (the family would be shown "not judged (mixed environments)")."""
    classes: dict[int, set[str]] = {}
    for cell in units.values():
        for seed, r in cell.items():
            classes.setdefault(seed, set()).update(s.get("device_model", UNKNOWN) for s in r.provenance)
    return {s: sorted(classes[s]) for s in todo if classes.get(s, {here}) - {here}}
