import random

import numpy as np
import pytest
import torch

from dadam3 import checkpoint as ckpt
from dadam3.errors import ConfigError


def _draw() -> tuple:
    return (torch.rand(5).tolist(), torch.randn(3, dtype=torch.float64).tolist(),
            np.random.rand(4).tolist(), np.random.randn(3).tolist(),
            [random.random() for _ in range(3)], random.gauss(0.0, 1.0))


def test_atomic_save_roundtrip(tmp_path):
    obj = {"x": torch.arange(6.0).reshape(2, 3), "iteration": 7, "nested": {"a": [1, 2]}}
    path = ckpt.atomic_save(obj, tmp_path / "run" / "checkpoints" / "last.pt")
    back = ckpt.load(path)
    assert torch.equal(back["x"], obj["x"]) and back["iteration"] == 7 and back["nested"] == {"a": [1, 2]}
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.pt"]


def test_failure_mid_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    ckpt.atomic_save({"iteration": 1, "w": torch.ones(1000)}, path)
    good_bytes = path.read_bytes()
    real_save = torch.save

    def save_half_then_die(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        f.seek(0)
        f.truncate(100)  # a partial, unreadable pickle
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(torch, "save", save_half_then_die)
    with pytest.raises(OSError, match="simulated"):
        ckpt.atomic_save({"iteration": 2, "w": torch.zeros(1000)}, path)
    monkeypatch.undo()

    assert path.read_bytes() == good_bytes
    assert ckpt.load(path)["iteration"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temp file left


def test_keyboard_interrupt_mid_write_leaves_no_temp(tmp_path, monkeypatch):
    def interrupted(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ckpt.atomic_save({"a": 1}, tmp_path / "last.pt")
    assert list(tmp_path.iterdir()) == []


def test_rng_state_capture_restore_reproduces_draws():
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    _draw()  # move away from the seeded start, and leave a cached gaussian in numpy/python
    state = ckpt.capture_rng_state()
    first = _draw()
    _draw()
    ckpt.restore_rng_state(state)
    assert _draw() == first


def test_rng_state_survives_checkpoint_file_with_weights_only(tmp_path):
    state = ckpt.capture_rng_state()
    first = _draw()
    path = ckpt.atomic_save({"rng": state}, tmp_path / "last.pt")
    _draw()
    ckpt.restore_rng_state(ckpt.load(path, weights_only=True)["rng"])
    assert _draw() == first


def test_resolve_resume_path(tmp_path):
    run = tmp_path / "run"
    last = ckpt.atomic_save({}, ckpt.checkpoint_path(run))
    assert last == run / "checkpoints" / "last.pt"
    assert ckpt.resolve_resume_path(str(run)) == last
    assert ckpt.resolve_resume_path(str(run / "checkpoints")) == last
    assert ckpt.resolve_resume_path(str(last)) == last
    snap = ckpt.atomic_save({}, run / "checkpoints" / "iter_00001200.pt")   # any file
    assert snap.name == "iter_00001200.pt" and ckpt.resolve_resume_path(snap) == snap


@pytest.mark.parametrize("where", ["missing", "empty_dir"])
def test_resolve_resume_path_missing(tmp_path, where):
    target = tmp_path / "nope"
    if where == "empty_dir":
        target.mkdir()
    with pytest.raises(ConfigError) as e:
        ckpt.resolve_resume_path(str(target))
    msg = str(e.value)
    assert e.value.key == "resume" and msg.startswith(f"resume={target}: no checkpoint at")
    assert "\n" not in msg
