"""Issue 60's closing table: every example the issue lists, run before (a checkout of the commit
before the round) and after (this checkout), through the real command line.

    python scripts/contract_before_after.py --before /tmp/base60 --after . --out docs/run_contract_before_after.md
    python scripts/contract_before_after.py --before /tmp/base60 --after . --only lock-symlink-resume

Each example builds its hostile setup afresh in a temporary folder that stands for the user's home
(``thesis.tex``, ``appendix.md``, a run or a results folder, a git repository of the user's, ...),
then runs the command as a subprocess of ``sys.executable`` with ``PYTHONPATH=<checkout>`` (the
checkout's ``dadam3`` is imported: checked once per checkout and printed in the header), its
working directory an empty folder inside that home, under a timeout (a timeout is a result:
``hang``) and an address-space limit (8 GiB; 4 GiB where a file is a link to ``/dev/zero``). It
records the exit status, the lines printed (stdout and stderr, non-empty), and every file or folder
under the home outside the run's own directory (or the report's ``REPORT.md`` and ``report/``;
the code checkout in the provenance examples) that the command created, modified (SHA-256) or
deleted; a run's key file (``metrics.jsonl``, ``last.pt``, ``run_id``, ...) that it lost; a run
directory a failed command left behind; and a note where the example is about what was recorded
(``code_commit``, a sample PNG left, the niceness of the runs).

The setups are those of tests/test_run_contract*.py (LINKS, SMALL_FILES, REFUSED, PROVENANCE,
MESSAGES), copied here so that the same setup runs against both checkouts whatever the tests
become. The ``check`` column compares the AFTER result with what the round promises for it
(refusals: one line, a non-zero status; nothing outside changed): anything else is a defect.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from dadam3.errors.files import write_text_whole

PY = sys.executable
PRLIMIT = shutil.which("prlimit")
GIB = 1024 ** 3
TOY = ["experiment=toy_gaussians", "loop.n_critic=1", "model.hidden=16", "loop.batch_size=8", "loop.progress=false",
       "loop.log_every=2", "metrics.every=4", "metrics.samples=200", "loop.sample_every=4", "loop.checkpoint_every=3"]
KEY_FILES = {"metrics.jsonl", "metrics.csv", "run_id", "last.pt", "last.pt.sha256", "config_resolved.yaml",
             "provenance.json", "REPORT.md"}
SAID = ("error", "warning", "stopped", "Traceback", "kept", "removed")


def ov(*groups: list[str]) -> list[str]:
    """Overrides merged by key, the last one given winning (each key once on the command line)."""
    merged: dict[str, str] = {}
    for group in groups:
        for arg in group:
            merged[arg.split("=", 1)[0]] = arg
    return list(merged.values())


TRAIN = ov(TOY, ["loop.iterations=2"])


class Skip(Exception):
    """The example cannot be set up here (the reason is written in the table)."""


@dataclass
class Expect:
    """What the round promises for the AFTER run."""
    rc: object = "nonzero"          # an int, "nonzero", or None (any)
    one_line: bool = True           # exactly one non-empty line printed
    has: tuple[str, ...] = ()       # each in the output
    lacks: tuple[str, ...] = ()     # none in the output
    note_has: str = ""              # in the probe's note
    note_lacks: str = ""


REFUSE = Expect()


def ok(**kw) -> Expect:
    return Expect(rc=0, one_line=False, **kw)


@dataclass
class Cmd:
    argv: list[str]
    owned: list[Path]                       # the run's (report's, code's) own paths: not the user's files
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    timeout: int = 120
    fsize: int | None = None
    mem: int = 8 * GIB
    probe: Callable[[], str] | None = None  # a note on what the command recorded


@dataclass
class Example:
    name: str
    group: str
    title: str
    setup: Callable[[Ctx], Cmd]
    expect: Expect
    words: tuple[str, ...] = ()     # noted when the output says them (what a message advised)


class Fixtures:
    """What several examples copy (a finished run, a reported results tree, ...), made once per checkout."""

    def __init__(self, root: Path):
        self.root = root
        self.locks: dict[tuple[str, str], threading.Lock] = {}
        self.made: dict[tuple[str, str], Path | Exception] = {}
        self.guard = threading.Lock()

    def get(self, name: str, side: str, code: Path) -> Path:
        with self.guard:
            lock = self.locks.setdefault((name, side), threading.Lock())
        with lock:
            if (name, side) not in self.made:
                where = self.root / side / name
                where.mkdir(parents=True)
                try:
                    self.made[(name, side)] = FIXTURES[name](where, code)
                except Exception as e:          # recorded in every example that needs it
                    self.made[(name, side)] = e
            made = self.made[(name, side)]
        if isinstance(made, Exception):
            raise Skip(f"setup failed: {made}")
        return made


@dataclass
class Ctx:
    home: Path
    side: str
    code: Path
    fixtures: Fixtures

    def fixture(self, name: str) -> Path:
        return self.fixtures.get(name, self.side, self.code)

    def trained(self, to: str) -> Path:
        """A finished 2-iteration run made in place by this checkout (not a copy: the code before the
        round refused every copy under overwrite=true)."""
        run = self.home / to
        must(py("dadam3.train", *TRAIN, f"hydra.run.dir={run}"), self.code, self.home / "cwd")
        return run

    def copy(self, name: str, to: str) -> Path:
        target = self.home / to
        shutil.copytree(self.fixture(name), target, symlinks=True)
        return target


# ---------------------------------------------------------------- running a command

def base_env(code: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "HYDRA_")) and k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(code), PATH=f"{Path(PY).parent}:{env.get('PATH', '/usr/bin:/bin')}",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    return env


def run(argv: list[str], code: Path, cwd: Path, env: dict[str, str] | None = None, timeout: int = 120,
        fsize: int | None = None, mem: int = 8 * GIB) -> tuple[object, str, float]:
    """(exit status or "hang", stdout and stderr merged, seconds)."""
    limits = [PRLIMIT, f"--as={mem}", *([f"--fsize={fsize}"] if fsize else []), "--"] if PRLIMIT else []
    full = {**base_env(code), **(env or {})}
    t0 = time.monotonic()
    p = subprocess.Popen([*limits, *argv], cwd=cwd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc: object = p.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)        # the command's own process group (its children too)
        except ProcessLookupError:
            pass
        out, _ = p.communicate()
        rc = "hang"
    return rc, out.decode(errors="replace"), time.monotonic() - t0


def py(module: str, *args: str) -> list[str]:
    return [PY, "-m", module, *args]


def must(argv: list[str], code: Path, cwd: Path, **kw) -> str:
    rc, out, _ = run(argv, code, cwd, **kw)
    if rc != 0:
        raise RuntimeError(f"{' '.join(argv[2:4])} ... exit {rc}: {last_line(out)}")
    return out


def last_line(out: str) -> str:
    lines = [x for x in out.splitlines() if x.strip()]
    return lines[-1][:200] if lines else "(nothing printed)"


def git(*args: str, cwd: Path | None = None, env: dict | None = None) -> str:
    e = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                          env={**e, **(env or {})}).stdout.strip()


# ---------------------------------------------------------------- what changed

def under(p: Path, roots: list[Path]) -> bool:
    return any(p == r or r in p.parents for r in roots)


def snapshot(home: Path, owned: list[Path]) -> dict[str, tuple]:
    """Every entry under ``home`` outside ``owned``: its kind and content (no link followed)."""
    seen: dict[str, tuple] = {}
    for d, dirs, files in os.walk(home):
        for n in list(dirs) + files:
            p = Path(d) / n
            if under(p, owned) or n == "__pycache__" or n.endswith((".pyc", ".nbi", ".nbc")):
                if n in dirs:
                    dirs.remove(n)
                continue
            st = os.lstat(p)
            rel = str(p.relative_to(home))
            if stat.S_ISLNK(st.st_mode):
                seen[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                seen[rel] = ("dir",)
            elif stat.S_ISREG(st.st_mode):
                seen[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                seen[rel] = ("special", stat.S_IFMT(st.st_mode))
    return seen


def changes(before: dict, after: dict) -> list[str]:
    out = [f"{k} (deleted)" for k in before if k not in after]
    out += [f"{k} (created)" for k in after if k not in before]
    out += [f"{k} (modified)" for k in before if k in after and before[k] != after[k]]
    return sorted(out)


def key_files(owned: list[Path]) -> set[Path]:
    found = set()
    for root in owned:
        if root.is_symlink() or not root.exists():
            continue
        for p in [root] if root.is_file() else root.rglob("*"):
            if p.name in KEY_FILES and not p.is_symlink() and p.is_file():
                found.add(p)
    return found


# ---------------------------------------------------------------- fixtures

def fx_train(where: Path, code: Path) -> Path:
    """A finished 2-iteration training run (tests/test_run_contract_files.py's ``finished``)."""
    must(py("dadam3.train", *TRAIN, f"hydra.run.dir={where / 'run'}"), code, where)
    return where / "run"


DIRICHLET = ["dataset=fake", "dataset.length=200", "model=dcgan32", "model.width=0.0625", "nodes=2",
             "loop.batch_size=4", "metrics.every=0", "device=cpu", "loop.progress=false", "loop.sample_every=100",
             "loop.checkpoint_every=100"]


def fx_dirichlet(where: Path, code: Path) -> Path:
    must(py("dadam3.train", *DIRICHLET, "dataset.partition=dirichlet", "dataset.alpha=1", "loop.iterations=2",
            f"hydra.run.dir={where / 'run'}"), code, where)
    return where / "run"


def fig2_tree(results: Path) -> Path:
    """Fig. 2's miniature in its preset folders (3 seeds of two methods): the report draws its curves."""
    for s in range(3):
        for method, fid in (("adam3", 100.0), ("oadagrad", 120.0)):
            d = make_run(results, method, 2e-4, s, fid + s, family="fig2")
            target = results / "fmnist" / "fig2" / method / f"seed{s}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(d, target)
    return results


def fx_fig2(where: Path, code: Path) -> Path:
    """:func:`fig2_tree`, reported once."""
    results = fig2_tree(where / "results")
    must(py("dadam3.report", f"--results={results}"), code, where, timeout=300)
    return results


def fx_clone(where: Path, code: Path) -> Path:
    """A clone of the checkout's commit, its dadam3/ copied over and committed (as the provenance tests do)."""
    c = where / "clone"
    common = Path(git("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=code))
    head = git("rev-parse", "HEAD", cwd=code)
    git("clone", "-q", "--shared", "--no-checkout", str(common), str(c))
    git("-C", str(c), "sparse-checkout", "set", "--no-cone", "/*", "!/results/")
    git("-C", str(c), "checkout", "-q", head)
    shutil.copytree(code / "dadam3", c / "dadam3", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    git("-C", str(c), "add", "-A", "dadam3")
    git("-C", str(c), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "under test", "--allow-empty")
    return c


FIXTURES = {"train": fx_train, "dirichlet": fx_dirichlet, "fig2": fx_fig2, "clone": fx_clone}


# ---------------------------------------------------------------- the report's runs (tests/report_plan_runs.py)

COMMIT = "eda9b562c32f8f2a575d1ebb4118539c7672361c"      # a commit of both checkouts' history


def lr_name(lr: float) -> str:
    mantissa, exponent = f"{lr:.6e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def make_run(results: Path, method: str, lr: float, seed: int, fid: float, family: str = "fig2") -> Path:
    import zlib
    d = results / "fmnist" / "round3" / family / f"lr{lr_name(lr)}" / method / f"seed{seed}"
    d.mkdir(parents=True)
    own = zlib.crc32(d.relative_to(results).as_posix().encode()) % 1000 * 1e-12
    recs = []
    for k, frac in ((100, 0.0), (200, 1.0)):
        f = 400.0 + frac * (fid - 400.0)
        recs.append({"iteration": k, "loss_d": 1.0 + k / 1000 + own, "fid_mean": f, "is_mean": 2.0, "kid_mean": 1.0,
                     "fid_mean_fmnist_mlp": f, "is_mean_fmnist_mlp": 2.0, "kid_mean_fmnist_mlp": 1.0})
    recs.append({"iteration": 200, "status": "finished"})
    write_records(d, recs)
    cfg = {"seed": seed, "nodes": 1, "optimizer": {"name": method, "lr": lr}, "loop": {"iterations": 200}}
    (d / "config_resolved.yaml").write_text(yaml.safe_dump(cfg))
    seg = {"from_iteration": 0, "code_commit": COMMIT, "device_model": "Intel(R) Xeon(R) Processor", "torch": "2",
           "python": "3.11", "started": "2026-01-02T00:00:00+00:00"}
    (d / "provenance.json").write_text(json.dumps([seg]))
    (d / "run_id").write_text(f"{family}-{method}-{lr}-{seed}\n")
    return d


def records(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]


def write_records(d: Path, recs: list[dict]) -> None:
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def edit_provenance(d: Path, **fields) -> None:
    segs = json.loads((d / "provenance.json").read_text())
    (d / "provenance.json").write_text(json.dumps([{**segs[0], **fields}, *segs[1:]]))


# ---------------------------------------------------------------- setups: training runs and their links

def thesis(home: Path) -> Path:
    t = home / "thesis.tex"
    t.write_text("my thesis\n")
    return t


RESUME = ["loop.iterations=3"]


def train_cmd(c: Ctx, run: Path, *args: str, **kw) -> Cmd:
    return Cmd(py("dadam3.train", *args), [run], **kw)


def resume(c: Ctx, run: Path, *more: str, **kw) -> Cmd:
    return train_cmd(c, run, f"resume={run}", *(more or RESUME), **kw)


def s_lock_symlink(how: str) -> Callable[[Ctx], Cmd]:
    def setup(c: Ctx) -> Cmd:
        run = c.copy("train", "run")
        (run / ".lock").unlink()
        if how == "hard":
            os.link(thesis(c.home), run / ".lock")
        else:
            (run / ".lock").symlink_to(thesis(c.home))
        return resume(c, run)
    return setup


def s_lock_overwrite(how: str) -> Callable[[Ctx], Cmd]:
    def setup(c: Ctx) -> Cmd:
        run = c.trained("run")
        (run / ".lock").unlink()
        (os.link if how == "hard" else lambda t, p: Path(p).symlink_to(t))(thesis(c.home), run / ".lock")
        return train_cmd(c, run, *TRAIN, "overwrite=true", f"hydra.run.dir={run}")
    return setup


def s_lock_fresh(c: Ctx) -> Cmd:
    run = c.home / "run"
    run.mkdir()
    (run / ".lock").symlink_to(thesis(c.home))
    return train_cmd(c, run, *TRAIN, f"hydra.run.dir={run}")


def s_synthetic_lock(c: Ctx) -> Cmd:
    run = c.home / "run"
    run.mkdir()
    (run / ".lock").symlink_to(thesis(c.home))
    return Cmd(py("dadam3.synthetic", "iterations=50", f"hydra.run.dir={run}"), [run])


def s_samples_symlink(c: Ctx) -> Cmd:
    run = c.copy("train", "run")
    (c.home / "mine").mkdir()
    (c.home / "mine" / "keep.txt").write_text("mine\n")
    shutil.rmtree(run / "samples")
    (run / "samples").symlink_to(c.home / "mine")
    return resume(c, run, "loop.iterations=4")


def s_checkpoints_symlink(c: Ctx) -> Cmd:
    run = c.copy("train", "run")
    shutil.move(run / "checkpoints", c.home / "elsewhere")
    (run / "checkpoints").symlink_to(c.home / "elsewhere")
    return resume(c, run)


def s_run_dir_symlink(c: Ctx) -> Cmd:
    (c.home / "elsewhere").mkdir()
    (c.home / "elsewhere" / "keep.txt").write_text("mine\n")
    run = c.home / "run"
    run.symlink_to(c.home / "elsewhere")
    return train_cmd(c, run, *TRAIN, f"hydra.run.dir={run}")


def s_logs_hardlinked(c: Ctx) -> Cmd:
    run = c.copy("train", "run")
    for name in ("train.log", "metrics.jsonl", ".lock", "manifest.txt"):      # a `cp -al` backup
        os.link(run / name, c.home / f"backup.{name}")
    return resume(c, run)


def s_overwrite_copy(c: Ctx) -> Cmd:
    run = c.copy("train", "run")            # shutil.copytree: new inodes, as `cp -r`
    return train_cmd(c, run, *TRAIN, "overwrite=true", f"hydra.run.dir={run}")


def dev_zero(name: str, overwrite: bool = False) -> Callable[[Ctx], Cmd]:
    def setup(c: Ctx) -> Cmd:
        run = c.copy("train", "run")
        (run / name).unlink()
        (run / name).symlink_to("/dev/zero")
        cmd = (train_cmd(c, run, *TRAIN, "overwrite=true", f"hydra.run.dir={run}") if overwrite
               else resume(c, run))
        cmd.mem = 4 * GIB
        return cmd
    return setup


def s_eisdir(c: Ctx) -> Cmd:
    run = c.copy("train", "run")
    (run / "samples" / "iter_000004.png").mkdir()
    return resume(c, run, "loop.iterations=4")


def s_efbig(c: Ctx) -> Cmd:
    run = c.home / "big"
    return train_cmd(c, run, *ov(TOY, ["metrics.every=0", "loop.log_every=1", "loop.sample_every=1000",
                                       "loop.checkpoint_every=1000", "loop.iterations=200"]),
                     f"hydra.run.dir={run}", fsize=12_000)


def pngs(run: Path) -> Callable[[], str]:
    def probe() -> str:
        left = sorted((p.name, p.stat().st_size) for p in (run / "samples").glob("*") if p.is_file()) \
            if (run / "samples").is_dir() else []
        return "samples/: " + (", ".join(f"{n} ({s} bytes)" for n, s in left) if left else "no file left")
    return probe


def s_png(c: Ctx) -> Cmd:
    run = c.home / "run"
    return train_cmd(c, run, *ov(TOY, ["metrics.every=0", "loop.sample_every=2", "loop.checkpoint_every=1000",
                                       "loop.iterations=4"]), f"hydra.run.dir={run}", fsize=20_000, probe=pngs(run))


def s_dirichlet_split(c: Ctx) -> Cmd:
    run = c.home / "run"
    return train_cmd(c, run, "dataset=fake", "dataset.length=100", "model=dcgan32", "model.width=0.0625", "nodes=20",
                     "loop.batch_size=8",
                     "dataset.partition=dirichlet", "dataset.alpha=1000", "device=cpu", f"hydra.run.dir={run}",
                     timeout=60)


def s_dirichlet_resume(c: Ctx) -> Cmd:
    run = c.copy("dirichlet", "run")
    return resume(c, run, "dataset.alpha=0.5", "loop.iterations=3")


def user_dir(home: Path, name: str, text: str) -> Path:
    (home / "conf" / "experiment").mkdir(parents=True)
    (home / "conf" / "experiment" / f"{name}.yaml").write_text(text)
    return home / "conf"


BAD_PRESET = "# @package _global_\ndefaults:\n  - toy_gaussians\n  - _self_\noptimizer:\n  lrr: 0.1\n"
SHADOW = "# @package _global_\ndefaults:\n  - override /dataset: gaussians\n  - override /model: mlp\noptimizer:\n" \
         "  lr: 0.0042\n"


def s_bad_preset(c: Ctx) -> Cmd:
    run = c.home / "run"
    return train_cmd(c, run, "--config-dir", str(user_dir(c.home, "bad", BAD_PRESET)), "experiment=bad",
                     f"hydra.run.dir={run}")


def s_missing_config_dir(c: Ctx) -> Cmd:
    run = c.home / "run"
    return train_cmd(c, run, "--config-dir", str(c.home / "nope"), "experiment=toy_gaussians", f"hydra.run.dir={run}")


def s_missing_searchpath(c: Ctx) -> Cmd:
    run = c.home / "run"
    return Cmd(py("dadam3.synthetic", "iterations=50", f"hydra.searchpath=[file://{c.home / 'nope'}]",
                  f"hydra.run.dir={run}"), [run])


def recorded_lr(run: Path) -> Callable[[], str]:
    def probe() -> str:
        cfg = run / "config_resolved.yaml"
        if not cfg.is_file():
            return "no run made"
        lr = (yaml.safe_load(cfg.read_text()).get("optimizer") or {}).get("lr")
        return f"ran with optimizer.lr={lr} (the user's preset says 0.0042)"
    return probe


def s_shadow_preset(c: Ctx) -> Cmd:
    run = c.home / "run"
    return train_cmd(c, run, "--config-dir", str(user_dir(c.home, "toy_gaussians", SHADOW)), "experiment=toy_gaussians",
                     *ov(TRAIN[1:]), f"hydra.run.dir={run}", probe=recorded_lr(run))


def s_iterations(value: str) -> Callable[[Ctx], Cmd]:
    def setup(c: Ctx) -> Cmd:
        run = c.home / "run"
        return Cmd(py("dadam3.synthetic", f"iterations={value}", f"hydra.run.dir={run}"), [run], timeout=60)
    return setup


def s_refused_fresh(c: Ctx) -> Cmd:
    run = c.home / "a" / "b" / "run"
    return Cmd(py("dadam3.train", "experiment=toy_gaussians", "loop.iterations=10", "loop.lr_warmup=11",
                  f"hydra.run.dir={run}"), [c.home / "a"])


# ---------------------------------------------------------------- setups: the report

def report_cmd(results: Path, **kw) -> Cmd:
    return Cmd(py("dadam3.report", f"--results={results}"), [results / "REPORT.md", results / "report"],
               timeout=kw.pop("timeout", 180), **kw)


def tree(c: Ctx) -> tuple[Path, Path]:
    results = c.home / "results"
    return results, make_run(results, "adam3", 8e-4, 0, 90.0, family="fig2")


def report_case(change: Callable[[Path, Path], None]) -> Callable[[Ctx], Cmd]:
    def setup(c: Ctx) -> Cmd:
        results, d = tree(c)
        change(results, d)
        return report_cmd(results)
    return setup


def r_duplicated_evaluation(results, d):
    recs = records(d)
    write_records(d, [*recs[:2], {**recs[1], "fid_mean": 10.0, "fid_mean_fmnist_mlp": 10.0}, *recs[2:]])


def r_seed_folder_linked(results, d):
    (d.parent / "seed1").symlink_to(d)


def r_log_cut_plus_finished(results, d):
    write_records(d, [records(d)[0], {"iteration": 200, "status": "finished"}])


def r_copies(results, d):
    for s in (1, 2):
        c = d.parent / f"seed{s}"
        shutil.copytree(d, c)
        cfg = (c / "config_resolved.yaml").read_text()
        (c / "config_resolved.yaml").write_text(cfg.replace("seed: 0", f"seed: {s}"))
        (c / "run_id").write_text(f"copy-{s}\n")


def r_step_size_in_preset_folder(results, d):
    c = results / "fmnist" / "fig2" / "adam3" / "seed3"       # the preset experiment=fmnist_fig2's folder: lr 2e-4
    c.parent.mkdir(parents=True)
    shutil.copytree(d, c)
    cfg = yaml.safe_load((c / "config_resolved.yaml").read_text())
    (c / "config_resolved.yaml").write_text(yaml.safe_dump({**cfg, "seed": 3, "optimizer": {"name": "adam3",
                                                                                            "lr": 1e-3}}))
    (c / "run_id").write_text("fig2-adam3-seed3\n")          # a run of its own, not a copy: only its step size
    write_records(c, [{**r, "loss_d": r["loss_d"] + 1e-3} if "loss_d" in r else r for r in records(c)])


def r_step_size_in_cell_folder(results, d):
    cfg = yaml.safe_load((d / "config_resolved.yaml").read_text())       # in lr8e-4/adam3/seed0: a run at 1.6e-3
    (d / "config_resolved.yaml").write_text(yaml.safe_dump({**cfg, "optimizer": {"name": "adam3", "lr": 1.6e-3}}))


def r_dangling_log(results, d):
    other = make_run(results, "adam3", 8e-4, 1, 91.0, family="fig2")
    (other / "metrics.jsonl").unlink()
    (other / "metrics.jsonl").symlink_to(results / "gone.jsonl")


def r_seed_superscript(results, d):
    shutil.copytree(d, d.parent / "seed²")


def r_deep_json(results, d):
    (d / "provenance.json").write_text("[" * 100_000 + "]" * 100_000)


def r_deep_yaml(results, d):
    (d / "config_resolved.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")


def r_segments_out_of_order(results, d):
    seg = json.loads((d / "provenance.json").read_text())[0]
    (d / "provenance.json").write_text(json.dumps([{**seg, "from_iteration": 100}, {**seg, "from_iteration": 0}]))


def r_unknown_commit(results, d):
    toy = results / "toy_gaussians" / "a_run"        # outside any plan: listed in "Every run"
    toy.parent.mkdir(parents=True)
    shutil.move(d, toy)
    edit_provenance(toy, code_commit="unknown (git is not installed or not on PATH)")


def s_report_unknown_commit(c: Ctx) -> Cmd:
    results, d = tree(c)
    r_unknown_commit(results, d)

    def probe() -> str:
        text = (results / "REPORT.md").read_text() if (results / "REPORT.md").is_file() else ""
        return "REPORT.md lists the run" if "toy_gaussians/a_run" in text else "the run is not in REPORT.md"
    cmd = report_cmd(results)
    cmd.probe = probe
    return cmd


def s_report_md_symlink(c: Ctx) -> Cmd:
    results = c.copy("fig2", "results")
    appendix = c.home / "appendix.md"
    appendix.write_text("my appendix\n")
    (results / "REPORT.md").unlink()
    (results / "REPORT.md").symlink_to(appendix)
    return report_cmd(results)


def s_figure_symlink(c: Ctx) -> Cmd:
    results = c.copy("fig2", "results")
    figures = sorted((results / "report").glob("*.png"))
    if not figures:
        raise Skip("its report of Fig. 2's miniature draws no figure")
    mine = c.home / "figure.png"
    mine.write_bytes(b"my figure")
    figures[0].unlink()
    figures[0].symlink_to(mine)
    return report_cmd(results)


def s_report_dir_symlink(c: Ctx) -> Cmd:
    results = c.copy("fig2", "results")
    (results / "report").rename(c.home / "figures")
    (results / "report").symlink_to(c.home / "figures")
    for png in sorted((c.home / "figures").glob("*.png"))[:1]:         # the user's edit of a figure there
        png.write_bytes(b"my edited figure")
    return report_cmd(results)


def s_report_fsize(c: Ctx) -> Cmd:
    results = fig2_tree(c.home / "results")

    def probe() -> str:
        left = sorted(f"{p.name} ({p.stat().st_size} bytes)" for p in (results / "report").glob("*")
                      if p.is_file()) if (results / "report").is_dir() else []
        return "report/: " + (", ".join(left) if left else "no file")
    cmd = report_cmd(results, fsize=20_000)
    cmd.probe = probe
    return cmd


def s_manifest_line(line: str, notes: bool) -> Callable[[Ctx], Cmd]:
    def setup(c: Ctx) -> Cmd:
        results = c.copy("fig2", "results")
        if notes:
            (results / "notes.md").write_text("my notes\n")
        with open(results / "report" / "manifest.txt", "a") as f:
            f.write(line + "\n")
        return report_cmd(results)
    return setup


# ---------------------------------------------------------------- setups: provenance (a clone of the checkout)

def other_repository(home: Path) -> Path:
    other = home / "other"
    other.mkdir()
    git("init", "-q", str(other))
    (other / "secret.txt").write_text("public\n")
    git("-C", str(other), "add", "-A")
    git("-C", str(other), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "theirs")
    (other / "secret.txt").write_text("SECRET=hunter2\n")
    return other


def provenance(how: str) -> Callable[[Ctx], Cmd]:
    def setup(c: Ctx) -> Cmd:
        code = c.home / "code"
        git("clone", "-q", "--shared", "--no-checkout", str(c.fixture("clone")), str(code))
        git("-C", str(code), "sparse-checkout", "set", "--no-cone", "/*", "!/results/")
        git("-C", str(code), "checkout", "-q")
        head = git("-C", str(code), "rev-parse", "HEAD")
        other_head = ""
        env: dict[str, str] = {"PYTHONPATH": str(code)}
        if how == "git off PATH":
            env["PATH"] = str(c.home / "nothing")
        elif how.startswith("GIT_DIR"):
            other = other_repository(c.home)
            other_head = git("-C", str(other), "rev-parse", "HEAD")
            env["GIT_DIR"] = str(other / ".git")
            if "WORK_TREE" in how:
                env["GIT_WORK_TREE"] = str(other)
        elif how == "damaged .git":
            (code / ".git" / "HEAD").write_text("garbage\n")
        elif how == "foreign owner":
            if os.geteuid() != 0:
                raise Skip("needs root to give the checkout to another user")
            for d, dirs, files in os.walk(code):
                for n in dirs + files:
                    os.lchown(os.path.join(d, n), 65534, 65534)
            os.lchown(code, 65534, 65534)
        run = c.home / "run"

        def probe() -> str:
            try:
                [segment, *_] = json.loads((run / "provenance.json").read_text())
            except (OSError, ValueError) as e:
                return f"no provenance.json ({type(e).__name__})"
            commit = str(segment.get("code_commit"))
            said = ("the code's HEAD" + commit[len(head):] if commit.startswith(head) else
                    "the other repository's HEAD" + commit[len(other_head):] if other_head and
                    commit.startswith(other_head) else repr(commit[:70]))
            files = "".join(p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())
            return f"code_commit: {said}" + ("; code.diff" if (run / "code.diff").exists() else "") + \
                ("; the other repository's secret copied into the run" if "hunter2" in files else "")
        return Cmd(py("dadam3.synthetic", "iterations=50", f"hydra.run.dir={run}"), [run, code], env=env, cwd=code,
                   probe=probe)
    return setup


# ---------------------------------------------------------------- setups: scripts

def fake_code(home: Path, checkout: Path, dirty: bool) -> Path:
    """A git repository holding scripts/fmnist_figure.sh (what evidence_round3.sh asks of CODE)."""
    code = home / "code"
    (code / "scripts").mkdir(parents=True)
    shutil.copy(checkout / "scripts" / "fmnist_figure.sh", code / "scripts" / "fmnist_figure.sh")
    git("init", "-q", str(code))
    git("-C", str(code), "add", "-A")
    git("-C", str(code), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "code")
    if dirty:
        with open(code / "scripts" / "fmnist_figure.sh", "a") as f:
            f.write("# a change not committed\n")
    return code


def s_evidence(dirty: bool, args: list[str]) -> Callable[[Ctx], Cmd]:
    def setup(c: Ctx) -> Cmd:
        code = fake_code(c.home, c.code, dirty)
        return Cmd(["bash", str(c.code / "experiments" / "evidence_round3.sh"), *args], [code],
                   env={"CODE": str(code), "PYTHON": PY, "POLL_S": "1"}, timeout=30 if not dirty else 60)
    return setup


def s_fig1_nice(nice: str) -> Callable[[Ctx], Cmd]:
    """scripts/fig1_synthetic.sh with a python stand-in that logs its niceness (tests' NICE test)."""
    def setup(c: Ctx) -> Cmd:
        tool = c.home / "tool"
        tool.mkdir()
        log, shim = tool / "nice.log", tool / "py"
        shim.write_text(f"#!/bin/sh\necho \"$(cut -d' ' -f19 /proc/self/stat) $*\" >> {log}\n"
                        "case \"$*\" in *dadam3.plot*) read -r go;; esac\nexit 0\n")
        shim.chmod(0o755)
        base = int(Path("/proc/self/stat").read_text().split()[18])

        def probe() -> str:
            runs = [x.split()[0] for x in log.read_text().splitlines() if "dadam3.synthetic" in x] \
                if log.exists() else []
            return f"the runs' niceness: {', '.join(runs) or 'no run started'} (this shell's: {base})"
        return Cmd(["bash", str(c.code / "scripts" / "fig1_synthetic.sh"), "iterations=10"], [tool, c.home / "out"],
                   env={"PYTHON": str(shim), "FIG1_OUT": str(c.home / "out"), "NICE": nice}, timeout=60, probe=probe)
    return setup


# ---------------------------------------------------------------- the examples, in the order

def E(name, group, title, setup, expect=REFUSE, words=()):
    return Example(name, group, title, setup, expect, words)


QUIET = ok(lacks=("error", "warning", "Traceback"))
EXAMPLES = [
    E("lock-symlink-resume", "links", "`ln -s ~/thesis.tex RUN/.lock`; `train resume=RUN`", s_lock_symlink("sym")),
    E("lock-hardlink-resume", "links", "`ln ~/thesis.tex RUN/.lock` (a hard link); `train resume=RUN`",
      s_lock_symlink("hard"), ok()),
    E("lock-symlink-fresh", "links", "`.lock` a symlink to ~/thesis.tex in an empty dir; a fresh `train`",
      s_lock_fresh),
    E("lock-symlink-overwrite", "links", "`.lock` a symlink to ~/thesis.tex; `train overwrite=true`",
      s_lock_overwrite("sym")),
    E("lock-hardlink-overwrite", "links", "`.lock` a hard link to ~/thesis.tex; `train overwrite=true`",
      s_lock_overwrite("hard"), ok()),
    E("synthetic-lock-symlink", "links", "`.lock` a symlink to ~/thesis.tex; `python -m dadam3.synthetic`",
      s_synthetic_lock),
    E("samples-symlink", "links", "RUN/samples a symlink to ~/mine/; `train resume=RUN`", s_samples_symlink),
    E("checkpoints-symlink", "links", "RUN/checkpoints a symlink to ~/elsewhere/; `train resume=RUN`",
      s_checkpoints_symlink),
    E("run-dir-symlink", "links", "RUN itself a symlink to ~/elsewhere/; a fresh `train`", s_run_dir_symlink),
    E("report-md-symlink", "links", "`ln -sf ~/appendix.md R/REPORT.md`; `report --results R`", s_report_md_symlink),
    E("figure-symlink", "links", "a figure under R/report/ a symlink to ~/figure.png; `report`", s_figure_symlink,
      ok()),
    E("report-dir-symlink", "links", "R/report a symlink to ~/figures/; `report`", s_report_dir_symlink),
    E("manifest-notes", "data loss", "`notes.md` added to R/report/manifest.txt (R/notes.md the user's); `report`",
      s_manifest_line("notes.md", True), ok(has=("notes.md",))),
    E("manifest-metrics", "data loss", "a run's metrics.jsonl added to R/report/manifest.txt; `report`",
      s_manifest_line("fmnist/fig2/adam3/seed0/metrics.jsonl", False), ok(has=("metrics.jsonl",))),
    E("logs-hardlinked", "data loss", "`cp -al` backup of train.log, metrics.jsonl, .lock, manifest.txt; "
      "`train resume=RUN`", s_logs_hardlinked, ok()),
    E("duplicated-evaluation", "wrong results", "the last evaluation duplicated with another FID; `report`",
      report_case(r_duplicated_evaluation), Expect(has=("a second record of iteration 200",))),
    E("seed-folder-symlink", "wrong results", "`ln -s seed0 seed1`; `report`", report_case(r_seed_folder_linked),
      Expect(has=("symbolic link",))),
    E("log-cut-finished", "wrong results", "a log cut at iteration 100 of 200 plus a `finished` record (the issue's "
      "250 of 1500 in miniature); `report`", report_case(r_log_cut_plus_finished), Expect(has=("finished",))),
    E("copies-edited-seed", "wrong results", "two copies of a run with an edited seed and run_id; `report`",
      report_case(r_copies), Expect(has=("copy",))),
    E("step-size-preset-folder", "wrong results", "a run at lr 1e-3 in the preset folder fmnist/fig2/adam3 (lr 2e-4); "
      "`report`", report_case(r_step_size_in_preset_folder), Expect(has=("disagrees with the folder",))),
    E("step-size-cell-folder", "wrong results", "a run at lr 1.6e-3 in the plan cell's folder lr8e-4/adam3; `report`",
      report_case(r_step_size_in_cell_folder), Expect(has=("disagrees with the folder",))),
    E("clean-clone", "provenance", "control: a clean clone, nothing changed; `synthetic`", provenance("control"),
      ok(note_has="the code's HEAD")),
    E("git-off-path", "provenance", "git off PATH; `synthetic` in a clone", provenance("git off PATH"),
      ok(note_has="git is not installed or not on PATH")),
    E("git-dir", "provenance", "GIT_DIR of another repository exported; `synthetic`", provenance("GIT_DIR"),
      ok(note_has="the code's HEAD", note_lacks="secret")),
    E("git-dir-work-tree", "provenance", "GIT_DIR and GIT_WORK_TREE of another repository; `synthetic`",
      provenance("GIT_DIR WORK_TREE"), ok(note_has="the code's HEAD", note_lacks="secret")),
    E("damaged-git", "provenance", "`.git/HEAD` damaged; `synthetic`", provenance("damaged .git"),
      ok(note_has="unknown (git: ")),
    E("foreign-owner", "provenance", "the checkout owned by another user (nobody); `synthetic` as root",
      provenance("foreign owner"), ok(note_has="another user")),
    E("report-unknown-commit", "provenance", "`report` on a run whose code_commit is 'unknown (git is not installed "
      "...)'", s_report_unknown_commit, ok(note_has="lists the run", lacks=("UserWarning",))),
    E("start-2099", "provenance", "a provenance start in 2099; `report`",
      report_case(lambda r, d: edit_provenance(d, started="2099-01-01T00:00:00+00:00")), Expect(has=("future",))),
    E("missing-commit", "provenance", "a code_commit the repository does not have; `report`",
      report_case(lambda r, d: edit_provenance(d, code_commit="0123456789abcdef0123456789abcdef01234567")),
      Expect(has=("no commit of this repository",))),
    E("segments-out-of-order", "provenance", "provenance segments out of order; `report`",
      report_case(r_segments_out_of_order), Expect(has=("comes before",))),
    E("deep-json", "special files", "provenance.json nested 100 000 deep; `report`", report_case(r_deep_json),
      Expect(has=("nested deeper",))),
    E("deep-yaml", "special files", "config_resolved.yaml nested 5 000 deep; `report`", report_case(r_deep_yaml),
      Expect(has=("nested deeper",))),
    E("seed-superscript", "special files", "a seed folder `seed²`; `report`", report_case(r_seed_superscript),
      Expect(has=("seed²",))),
    E("checksum-dev-zero", "special files", "checkpoints/last.pt.sha256 -> /dev/zero; `train resume=RUN`",
      dev_zero("checkpoints/last.pt.sha256"), Expect(lacks=("MemoryError",))),
    E("run-id-dev-zero", "special files", "run_id -> /dev/zero; `train resume=RUN`", dev_zero("run_id"),
      Expect(lacks=("MemoryError",))),
    E("manifest-dev-zero", "special files", "manifest.txt -> /dev/zero; `train overwrite=true`",
      dev_zero("manifest.txt", overwrite=True), Expect(lacks=("MemoryError",))),
    E("overwrite-copy", "messages", "`overwrite=true` on a copied run (`cp -r`)", s_overwrite_copy, QUIET,
      ("replaced since",)),
    E("eisdir", "messages", "a directory where the sample PNG goes (EISDIR); `train resume=RUN`", s_eisdir,
      Expect(rc=1, one_line=False, has=("(EISDIR)",), lacks=("free space",)), ("free space", "move away")),
    E("efbig", "messages", "`ulimit -f` 12 000 bytes (EFBIG); a fresh `train` of 200 iterations", s_efbig,
      Expect(rc=1, one_line=False, has=("(EFBIG)",), lacks=("free space",)), ("free space", "ulimit -f")),
    E("dirichlet-split", "messages", "Dirichlet alpha=1000, 20 nodes, 100 samples, batch 8 (DCGAN at width 1/16: "
      "its nets fit the memory; 60 s cap)",
      s_dirichlet_split, Expect(has=("lower loop.batch_size",)), ("raise", "lower loop.batch_size")),
    E("dirichlet-resume-alpha", "messages", "a Dirichlet run resumed with `dataset.alpha=0.5`", s_dirichlet_resume,
      Expect(has=("cannot change on resume",))),
    E("preset-error", "messages", "`optimizer.lrr` in a user's preset (--config-dir)", s_bad_preset,
      Expect(has=("optimizer.lrr=0.1",))),
    E("missing-config-dir", "messages", "`--config-dir` a folder that does not exist", s_missing_config_dir),
    E("dangling-metrics", "silent", "a seed's metrics.jsonl a dangling symlink; `report`", report_case(r_dangling_log),
      Expect(has=("symbolic link",))),
    E("missing-searchpath", "silent", "`hydra.searchpath` a folder that does not exist; `synthetic`",
      s_missing_searchpath),
    E("shadowed-preset", "silent", "a user preset `experiment=toy_gaussians` (lr 0.0042) in --config-dir",
      s_shadow_preset),
    E("evidence-dirty-code", "silent", "`CODE=<dirty checkout> experiments/evidence_round3.sh fig2 next`",
      s_evidence(True, ["fig2", "next"])),
    E("evidence-next-x", "silent", "`experiments/evidence_round3.sh fig2 next x` (30 s cap)",
      s_evidence(False, ["fig2", "next", "x"])),
    E("fig1-nice-7", "silent", "`NICE=7 scripts/fig1_synthetic.sh` (a python stand-in)", s_fig1_nice("7"),
      ok(note_has="niceness: 7, 7")),
    E("fig1-nice-high", "silent", "`NICE=high scripts/fig1_synthetic.sh` (a python stand-in)", s_fig1_nice("high")),
    E("iterations-1e21", "silent", "`synthetic iterations=1e21`", s_iterations("1e21")),
    E("iterations-10e21", "silent", "`synthetic iterations=1000000000000000000000` (60 s cap)",
      s_iterations("1000000000000000000000")),
    E("refused-run-dir", "silent", "a refused fresh run into ~/a/b/run (lr_warmup 11 > 10 iterations): a directory "
      "left?", s_refused_fresh, Expect(note_lacks="made")),
    E("zero-byte-png", "silent", "`ulimit -f` 20 000 bytes while a sample PNG is written", s_png,
      Expect(one_line=False, has=(".png",), note_has="no file left")),
    E("report-fsize", "silent", "`ulimit -f` 20 000 bytes while the report draws its first figure (a first report)",
      s_report_fsize, Expect(has=(".png",), note_has="report/: no file", note_lacks="made")),
]


# ---------------------------------------------------------------- one example on one checkout

@dataclass
class Result:
    rc: object = None
    lines: int = 0
    outside: list[str] = field(default_factory=list)
    first: str = ""
    note: str = ""
    skipped: str = ""
    seconds: float = 0.0
    text: str = ""


def said_first(out: str) -> str:
    lines = [x.strip() for x in out.splitlines() if x.strip()]
    for x in lines:
        if x.startswith(SAID) or "Error" in x or "WARNING" in x or "Warning" in x:
            return x
    return lines[0] if lines else "(nothing printed)"


def measure(ex: Example, side: str, code: Path, root: Path, fixtures: Fixtures) -> Result:
    home = root / side / ex.name
    (home / "cwd").mkdir(parents=True)
    c = Ctx(home, side, code, fixtures)
    try:
        cmd = ex.setup(c)
    except Skip as e:
        return Result(skipped=str(e))
    except Exception as e:          # a setup this checkout cannot make: said in the table
        return Result(skipped=f"setup failed: {type(e).__name__}: {e}")
    existed = {p: p.exists() or p.is_symlink() for p in cmd.owned}
    keys = key_files(cmd.owned)
    before = snapshot(home, cmd.owned)
    rc, out, seconds = run(cmd.argv, code, cmd.cwd or home / "cwd", env=cmd.env, timeout=cmd.timeout,
                           fsize=cmd.fsize, mem=cmd.mem)
    outside = changes(before, snapshot(home, cmd.owned))
    notes = []
    if cmd.probe is not None:
        try:
            notes.append(cmd.probe())
        except Exception as e:          # the note says it
            notes.append(f"probe failed: {e}")
    notes += [f"says {w!r}" for w in ex.words if w in out]
    lost = sorted(str(p.relative_to(home)) for p in keys if not p.exists())
    if lost:
        notes.append("lost " + ", ".join(lost))
    if rc != 0:                 # a folder the failed command made and left
        left = [p for p in cmd.owned if not existed[p] and p.is_dir() and not p.is_symlink()]
        notes += [f"made {p.relative_to(home)}/ ({sum(1 for _ in p.rglob('*'))} entries below)" for p in left]
    (root / side / f"{ex.name}.out").write_text(out)         # the whole output, for --keep
    lines = [x for x in out.splitlines() if x.strip()]
    shown = out.replace(str(home), "~")           # the home's path as the user reads it
    return Result(rc, len(lines), outside, said_first(shown), "; ".join(notes), seconds=seconds, text=out)


def verdict(ex: Example, r: Result) -> str:
    """The AFTER result against the round's promise: "ok" or what is wrong."""
    if r.skipped:
        return "skipped"
    e, wrong = ex.expect, []
    if r.rc == "hang":
        wrong.append("hangs")
    elif e.rc == "nonzero" and r.rc == 0:
        wrong.append("rc 0 where a refusal is expected")
    elif isinstance(e.rc, int) and r.rc != e.rc:
        wrong.append(f"rc {r.rc}, expected {e.rc}")
    if e.one_line and r.lines != 1:
        wrong.append(f"{r.lines} lines, expected 1")
    wrong += [f"does not say {h!r}" for h in e.has if h not in r.text]
    wrong += [f"says {x!r}" for x in e.lacks if x in r.text]
    if r.outside:
        wrong.append(f"{len(r.outside)} file(s) changed outside")
    if e.note_has and e.note_has not in r.note:
        wrong.append(f"note lacks {e.note_has!r}")
    if e.note_lacks and e.note_lacks in r.note:
        wrong.append(f"note has {e.note_lacks!r}")
    if "lost " in r.note:
        wrong.append("a key file lost")
    return "ok" if not wrong else "**DEFECT**: " + "; ".join(wrong)


# ---------------------------------------------------------------- the table

def cell(r: Result) -> str:
    if r.skipped:
        return f"skipped: {r.skipped}"
    rc = f"hang (timeout, {r.seconds:.0f} s)" if r.rc == "hang" else f"rc {r.rc}"
    if isinstance(r.rc, int) and r.rc < 0:
        rc += f" ({signal.Signals(-r.rc).name})"
    outside = "none" if not r.outside else f"**{len(r.outside)}**: " + ", ".join(r.outside[:3]) + \
        (f", +{len(r.outside) - 3} more" if len(r.outside) > 3 else "")
    return f"{rc}, {r.lines} line{'s' if r.lines != 1 else ''}, outside: {outside}"


def md(text: str, limit: int = 100) -> str:
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return text.replace("|", "\\|").replace("`", "'")


def table(rows: list[tuple[Example, Result, Result]]) -> str:
    out = ["| # | group | example | before: rc, lines, files changed outside | after: rc, lines, files changed "
           "outside | before: first line said | after: first line said | notes (before → after) | check (after) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for i, (ex, b, a) in enumerate(rows, 1):
        notes = f"{md(b.note, 160) or '–'} → {md(a.note, 160) or '–'}" if (b.note or a.note) else ""
        first = [f"`{md(r.first)}`" if not r.skipped else "" for r in (b, a)]
        out.append(f"| {i} | {ex.group} | {ex.title.replace('|', chr(92) + '|')} | {cell(b)} | {cell(a)} | "
                   f"{first[0]} | {first[1]} | {notes} | {verdict(ex, a)} |")
    return "\n".join(out)


def describe(code: Path) -> str:
    head = git("rev-parse", "HEAD", cwd=code)
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "dadam3", "scripts", "experiments", cwd=code)
    return f"`{head[:12]}`" + (f" plus uncommitted changes ({len(dirty.splitlines())} files)" if dirty else "")


def imported(code: Path) -> str:
    rc, out, _ = run([PY, "-c", "import dadam3; print(dadam3.__file__)"], code, Path(tempfile.gettempdir()))
    where = out.strip().splitlines()[-1] if out.strip() else "(nothing)"
    if rc != 0 or not Path(where).resolve().is_relative_to(code.resolve()):
        sys.exit(f"error: PYTHONPATH={code}: imports {where}, not the checkout's dadam3")
    return where


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, required=True, help="checkout of the code before (e.g. a worktree)")
    p.add_argument("--after", type=Path, default=Path(__file__).resolve().parent.parent, help="checkout after")
    p.add_argument("--out", type=Path, help="the markdown file to write (default: only print, with --only)")
    p.add_argument("--only", action="append", default=[], help="run only this example (repeatable)")
    p.add_argument("--jobs", type=int, default=2, help="commands at once (default 2)")
    p.add_argument("--keep", action="store_true", help="keep the temporary homes (their path is printed)")
    a = p.parse_args(argv)
    before, after = a.before.resolve(), a.after.resolve()
    examples = [e for e in EXAMPLES if not a.only or e.name in a.only]
    unknown = set(a.only) - {e.name for e in EXAMPLES}
    if unknown:
        sys.exit(f"error: --only: unknown examples {sorted(unknown)}; known: {[e.name for e in EXAMPLES]}")
    out = a.out or (None if a.only else Path("docs/run_contract_before_after.md"))
    files = {side: imported(code) for side, code in (("before", before), ("after", after))}
    print(f"dadam3 imported from {files['before']} (before) and {files['after']} (after)", flush=True)
    root = Path(tempfile.mkdtemp(prefix="contract_before_after."))
    fixtures = Fixtures(root / "fixtures")
    started, t0 = datetime.datetime.now(datetime.timezone.utc), time.monotonic()
    results: dict[tuple[str, str], Result] = {}

    def one(ex: Example, side: str) -> None:
        r = measure(ex, side, before if side == "before" else after, root, fixtures)
        results[(ex.name, side)] = r
        print(f"[{time.monotonic() - t0:5.0f} s] {ex.name} {side}: {cell(r)}", flush=True)

    try:
        with ThreadPoolExecutor(max_workers=a.jobs) as pool:
            for f in [pool.submit(one, ex, side) for ex in examples for side in ("before", "after")]:
                f.result()
    finally:
        if a.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    rows = [(ex, results[(ex.name, "before")], results[(ex.name, "after")]) for ex in examples]
    text = table(rows)
    print(text)
    if out is None:
        return
    command = "python scripts/contract_before_after.py " + " ".join(
        [f"--before {a.before}", f"--after {a.after}", f"--out {out}", *[f"--only {n}" for n in a.only],
         *([f"--jobs {a.jobs}"] if a.jobs != 2 else [])])
    defects = [i for i, (ex, _, r) in enumerate(rows, 1) if verdict(ex, r).startswith("**DEFECT")]
    header = f"""# The run contract, before → after (issue 60, reliability round 7)

Generated by `{command}` on {started:%Y-%m-%d %H:%M} UTC in {time.monotonic() - t0:.0f} s
({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end; {a.jobs} commands at once).

- **before**: {describe(before)} (`{before}`; dadam3 imported from `{files['before']}`)
- **after**: {describe(after)} (`{after}`; dadam3 imported from `{files['after']}`)

Each example is set up afresh in a temporary folder standing for the user's home (`thesis.tex`,
`appendix.md`, a git repository of the user's, the run or the results folder R), and its command
runs as `{Path(PY).name} -m ...` (or `bash <checkout>/...`) with `PYTHONPATH=<checkout>`, a working
directory inside that home, a timeout (120 s unless the example says; a timeout is `hang`) and an
8 GiB address-space limit (4 GiB for the `/dev/zero` examples). **lines**: the non-empty lines
printed, stdout and stderr together. **outside**: the files and folders under the home, outside
the run's directory (for the report: outside `R/REPORT.md` and `R/report/`; for the provenance
examples: outside the code's clone too), that the command created, modified (SHA-256) or deleted
— the user's files (a run's own files under R count as the user's for the report). **first line
said** (before, after): the first line saying error, warning, stopped, kept or removed (else the
first line), the home's path written `~`. **notes**: what the command recorded where the example is
about that, a key file of the run lost, a directory a failed command made (the run's, `report/`)
and left. **check**: the after result against the round's promise (a refusal: one line and a
non-zero status; nothing outside changed; the example's words); `DEFECT` rows are open. The setups
are those of `tests/test_run_contract*.py`, copied into `scripts/contract_before_after.py`.

"""
    footer = "\n\nDefects (after): " + (", ".join(f"row {i}" for i in defects) if defects else "none") + "\n"
    doc = header + text + footer
    for path, name in ((sys.prefix, "<venv>"), (before, "<before>"), (after, "<after>"),
                       (a.before, "<before>"), (a.after, "<after>")):
        doc = doc.replace(str(path), name)          # no path of this machine in a committed file
    write_text_whole(Path(out), doc)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
