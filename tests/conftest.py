"""Suite-wide settings: one torch thread per test process and its subprocesses, and, under
pytest-xdist (``make test`` runs ``-n 2``), the long end-to-end tests handed out first."""
import os

# Every test subprocess (CLI runs, torchrun ranks, scripts) inherits this: two xdist workers on
# two cores, each starting multi-threaded children, would oversubscribe the cores. Runs that set
# `threads` themselves (toy_gaussians: 1) are unaffected; no test depends on torch's default.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The figure drivers start each run niced (scripts/runs.sh: NICE, default 10): beside the other
# xdist worker a niced run gets a tenth of a core (the paper-scale smoke test: 27 s alone, 330 to
# 450 s beside a second suite). The suite runs them at its own priority.
os.environ.setdefault("NICE", "0")


def pytest_collection_modifyitems(session, config, items):
    """Under xdist, tests marked slow go first (stable order otherwise), so that no long test
    starts last and leaves one worker idle at the end."""
    if getattr(config.option, "numprocesses", None):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
