"""Architecture numbers of the dadam3 package found first on ``PYTHONPATH`` (issue 27, point 2).

    PYTHONPATH=<tree> python scripts/arch_metrics.py [--no-returns] [--resume] [--calls] [--step]

Run it on two trees for a before -> after (e.g. ``git worktree add /tmp/before <commit>``,
then ``PYTHONPATH=/tmp/before python scripts/arch_metrics.py``). The layer map and the
parameter counter are this checkout's ``tests/test_layering.py``, applied to that tree.

* ``package_lines``: lines of the ``.py`` files of ``dadam3/`` (as ``wc -l`` counts them);
  ``run_machinery_lines`` those of ``run/``, ``errors/`` and ``train.py``, and their share
  (issue 45: the run machinery against the package).
* ``concern_lines``: lines of each concern of the run machinery (``docs/architecture.md``'s concern
  table; its files and line budgets: ``CONCERNS`` of this checkout's ``tests/test_layering.py``).
* ``train_py_lines``: non-blank lines of ``dadam3/train.py``.
* ``longest_parameter_list``: the most parameters a caller can pass to one function in
  ``dadam3/`` (``test_layering.parameter_count``: ``self``/``cls`` not counted, ``*args`` and
  ``**kwargs`` one each), and where.
* ``upward_imports``: imports (lazy ones too) of a module from a layer above its own, with this
  checkout's ``test_layering.LAYERS`` (modules of the tree in no layer are listed apart).
* ``returns_to_entry`` (a runtime count of this script's own, not the static walk of the run
  config through the code that issue 35 counts): the set-up of ``python -m dadam3.train`` (run
  in this process with ``runpy``, the 2-D toy config of :data:`OVERRIDES`, one iteration), traced with
  ``sys.setprofile`` from the call of train.py's Hydra task ``main(cfg)`` (the config in hand;
  the module's import-time code, decorators included, is not counted) until
  ``WGANTrainer.fit`` is called. For every frame F running code of ``dadam3/train.py``, count
  the calls whose caller is F and whose callee is a Python function of another ``dadam3``
  module (``c_call`` events, and frames of other packages or of generated code such as
  dataclass ``__init__``, do not count); every such call but F's first is control that came
  back up into the entry point from the package
  and went out again for the next piece: returns(F) = max(0, calls(F) - 1), summed over the
  frames. With ``--resume`` the same walk is traced for ``resume=<that run> loop.iterations=2``
  after the run went to its end (``returns_to_entry_on_resume``; a resume composes the run's own
  config first). The same count for the frames of the build modules (``dadam3/run/start.py``
  and ``dadam3/run/resume_config.py``; ``run/build.py`` on trees that have it) is printed beside it
  (``returns_to_builders``): before the change they ran in train.py's frames and counted
  there, so ``returns_to_entry + returns_to_builders`` is the like-for-like total.
* ``file_returns`` (issue 45 point 5: the same walk counted file by file, which no folder move
  changes): in the same trace, for every frame F running code of the run machinery (``run/``,
  ``errors/``, ``train.py``), the calls whose caller is F and whose callee is a Python function
  of another ``dadam3`` file, taken in order and folded into runs of one callee file
  (``a a b a``: three runs); every run but F's first is control that came back up into F's file
  from another file and went out again: returns(F) = max(0, runs(F) - 1), summed over the frames
  (``file_returns_on_resume`` with ``--resume``).
* ``step_files`` (with ``--step``; issue 35 point 1): the files of ``dadam3/`` whose Python code
  runs in one ``optimizer.step()`` (traced with ``sys.setprofile``; the third step of Dadam3 on
  a 5-node ring, two parameter groups, float32 on the CPU; compilation and caches happen in the
  first steps), once with the CPU's default engine and once with the eager engine
  (``engine="eager"``; on a tree without that switch, ``opt._update = type(opt).update``).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import inspect
import json
import os
import runpy
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
OVERRIDES = ["experiment=toy_gaussians", "nodes=2", "model.hidden=8", "loop.batch_size=4", "loop.iterations=1",
             "loop.n_critic=1", "metrics.samples=20", "loop.progress=false", "device=cpu", "threads=1"]
BUILDERS = ("run/build.py", "run/start.py", "run/resume_config.py")


def layering(root: Path):
    """This checkout's tests/test_layering.py, pointed at ``root`` (the package to measure)."""
    spec = importlib.util.spec_from_file_location("_layering", HERE / "tests" / "test_layering.py")
    tl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tl)
    tl.ROOT = root
    tl.MODULES = {tl.module_name(p): p for p in sorted(root.rglob("*.py"))}
    return tl


def package_sizes(root: Path) -> dict:
    """Lines of the package's ``.py`` files, and of the run machinery (``run/``, ``errors/``, ``train.py``)."""
    def lines(paths):
        return sum(len(p.read_text().splitlines()) for p in paths)
    total = lines(root.rglob("*.py"))
    run = lines([*(root / "run").rglob("*.py"), *(root / "errors").rglob("*.py"), root / "train.py"])
    return {"package_lines": total, "run_machinery_lines": run, "run_machinery_share": round(run / total, 3)}


def static_numbers(root: Path) -> dict:
    tl = layering(root)
    lines = sum(1 for line in (root / "train.py").read_text().splitlines() if line.strip())
    longest, where = 0, ""
    for path in tl.MODULES.values():
        tree = ast.parse(path.read_text(), str(path))
        methods = {id(f) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body}
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = tl.parameter_count(fn, id(fn) in methods)
                if n > longest:
                    longest, where = n, f"{tl.relative(path)}:{fn.name}"
    unplaced, upward = [], []
    for m in tl.MODULES:
        try:
            tl.layer_of(m)
        except AssertionError:
            unplaced.append(m)
    for m in tl.MODULES:
        if m in unplaced:
            continue
        for d in sorted(tl.imports_of(m)):
            if d not in unplaced and tl.layer_of(d) > tl.layer_of(m):
                upward.append(f"{m} -> {d}")
    return {"concern_lines": tl.concern_lines(root), "train_py_lines": lines, "longest_parameter_list": longest,
            "longest_at": where,
            "upward_imports": len(upward), "upward": upward, "modules_in_no_layer": unplaced}


class Stop(BaseException):
    """``WGANTrainer.fit`` was reached: the set-up is over."""


def returns_to_entry(root: Path, resume: bool = False) -> dict:
    """The profile of the entry point's set-up, of a fresh run or (``resume``) of a resume of
    one that ended (see the module docstring)."""
    package = str(root) + os.sep
    entry = str(root / "train.py")
    builders = {str(root / b) for b in BUILDERS}
    calls: Counter = Counter()
    kinds: dict = {}
    started = []

    run_files = (str(root / "run") + os.sep, str(root / "errors") + os.sep, entry)
    open_runs: dict = {}         # a live frame of the run machinery -> [its last callee file, runs so far]
    file_returns = [0]

    def profile(frame, event, arg):
        if event == "return" and id(frame) in open_runs:
            file_returns[0] += max(0, open_runs.pop(id(frame))[1] - 1)
        if event != "call":
            return
        code = frame.f_code
        if code.co_name == "fit" and code.co_filename == str(root / "run" / "trainer.py"):
            sys.setprofile(None)
            raise Stop
        if code.co_name == "main" and code.co_filename == entry:
            started.append(True)
        caller = frame.f_back
        if not started or caller is None or not code.co_filename.startswith(package):
            return
        home = caller.f_code.co_filename
        if home.startswith(run_files) and code.co_filename != home:
            runs = open_runs.setdefault(id(caller), [None, 0])
            if runs[0] != code.co_filename:
                runs[:] = [code.co_filename, runs[1] + 1]
        if home in (entry, *builders) and code.co_filename != home:
            calls[id(caller), home] += 1
            kinds.setdefault(home, Counter())[f"{caller.f_code.co_name} -> {Path(code.co_filename).name}:"
                                              f"{code.co_name}"] += 1

    with tempfile.TemporaryDirectory() as tmp:
        argv = sys.argv
        sys.argv = ["dadam3.train", *OVERRIDES, f"hydra.run.dir={tmp}/run"]
        if resume:
            env = {**os.environ, "PYTHONPATH": str(root.parent)}
            subprocess.run([sys.executable, "-m", "dadam3.train", *sys.argv[1:]], env=env, check=True,
                           capture_output=True)
            sys.argv = ["dadam3.train", f"resume={tmp}/run", "loop.iterations=2"]
        sys.setprofile(profile)
        try:
            runpy.run_module("dadam3.train", run_name="__main__", alter_sys=True)
        except (Stop, SystemExit) as e:
            if not isinstance(e, Stop):
                raise RuntimeError(f"the run ended before WGANTrainer.fit: exit status {e.code}") from None
        finally:
            sys.setprofile(None)
            sys.argv = argv
    file_returns[0] += sum(max(0, n - 1) for _, n in open_runs.values())     # frames still open at fit
    into_entry = sum(max(0, n - 1) for (_, home), n in calls.items() if home == entry)
    into_builders = sum(max(0, n - 1) for (_, home), n in calls.items() if home != entry)
    key = "_on_resume" if resume else ""
    return {f"returns_to_entry{key}": into_entry, f"returns_to_builders{key}": into_builders,
            f"file_returns{key}": file_returns[0],
            f"calls_out{key}": {Path(h).name: dict(c.most_common()) for h, c in kinds.items()}}


def step_files(root: Path) -> dict:
    """The ``dadam3/`` files that one optimizer step runs Python code of (see the module docstring)."""
    import torch

    from dadam3.optim import build_optimizer, mixer_for
    package = str(root) + os.sep
    out = {}
    for engine in ("default", "eager"):
        params = [torch.zeros(5, 3, 4, requires_grad=True), torch.zeros(5, 7, requires_grad=True)]
        groups = [{"params": params[:1]}, {"params": params[1:], "maximize": True}]
        switch = "engine" in inspect.signature(build_optimizer).parameters
        kw = {"engine": "eager"} if engine == "eager" and switch else {}
        opt = build_optimizer("dadam3", groups, mixer_for("dadam3", 5, "ring"), **kw)
        if engine == "eager" and not switch:          # a tree without the switch
            opt._update = type(opt).update
        files: set = set()

        def profile(frame, event, arg):
            if event == "call" and frame.f_code.co_filename.startswith(package):
                files.add(os.path.relpath(frame.f_code.co_filename, root))
        for k in range(3):
            for p in params:
                p.grad = torch.full_like(p, 0.1 * (k + 1))
            if k == 2:
                sys.setprofile(profile)
            try:
                opt.step()
            finally:
                sys.setprofile(None)
        out[f"step_files_{engine}"] = sorted(files)
        out[f"step_files_{engine}_count"] = len(files)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--no-returns", action="store_true", help="the static numbers only")
    p.add_argument("--calls", action="store_true", help="list the calls out that these counts count")
    p.add_argument("--resume", action="store_true", help="the same counts for a resume too")
    p.add_argument("--step", action="store_true", help="the files one optimizer step runs (step_files)")
    a = p.parse_args()
    import dadam3
    root = Path(dadam3.__file__).resolve().parent
    out = {"package": str(root), **package_sizes(root), **static_numbers(root)}
    if a.step:
        out.update(step_files(root))
    if not a.no_returns:
        for resume in (False, True) if a.resume else (False,):
            with contextlib.redirect_stdout(sys.stderr):     # the run's log: stdout is the numbers'
                found = returns_to_entry(root, resume)
            if not a.calls:
                found = {k: v for k, v in found.items() if not k.startswith("calls_out")}
            out.update(found)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
