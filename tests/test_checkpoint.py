import pickle
import random

import numpy as np
import pytest
import torch

from dadam3.run import checkpoint as ckpt
from dadam3.run.checkpoint import files
from dadam3.run.state import capture_rng_state, restore_rng_state
from dadam3.run.checkpoint.resume import check_checkpoint
from dadam3.errors.config import ConfigError
from dadam3.run.directory import check_run_dir


def _draw() -> tuple:
    return (torch.rand(5).tolist(), torch.randn(3, dtype=torch.float64).tolist(),
            np.random.rand(4).tolist(), np.random.randn(3).tolist(),
            [random.random() for _ in range(3)], random.gauss(0.0, 1.0))


def test_atomic_save_roundtrip(tmp_path):
    obj = {"x": torch.arange(6.0).reshape(2, 3), "iteration": 7, "nested": {"a": [1, 2]}}
    path = ckpt.atomic_save(obj, tmp_path / "run" / "checkpoints" / "last.pt")
    back = ckpt.load(path)
    assert torch.equal(back["x"], obj["x"]) and back["iteration"] == 7 and back["nested"] == {"a": [1, 2]}
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.pt", "last.pt.sha256"]


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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "last.pt.sha256"]  # no temp file left


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
    state = capture_rng_state()
    first = _draw()
    _draw()
    restore_rng_state(state)
    assert _draw() == first


def test_rng_state_survives_checkpoint_file_with_weights_only(tmp_path):
    state = capture_rng_state()
    first = _draw()
    path = ckpt.atomic_save({"rng": state}, tmp_path / "last.pt")
    _draw()
    restore_rng_state(ckpt.load(path)["rng"])
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


# ---------------------------------------------------------------- files read back are data, never code

class _Payload:
    """What an attacker adds to a checkpoint: unpickling it would write the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def _state(**extra) -> dict:
    return {"kind": "dadam3.train/1", "iteration": 3, "config": {"seed": 0}, "G": {"w": torch.arange(4096.0)},
            "noise": ckpt.NodeList([torch.zeros(2)]), "record_on_grid": True, "run_id": "0" * 32, **extra}


def _write_sidecar(path):
    """The checksum an attacker who also controls the checksum file would write."""
    files.checksum_path(path).write_text(f"{files.file_sha256(path)}  {path.name}\n")


@pytest.mark.parametrize("zipped", [True, False])
@pytest.mark.parametrize("sidecar", [True, False])
def test_a_payload_in_a_checkpoint_is_refused_unrun(tmp_path, zipped, sidecar):
    marker, path = tmp_path / "marker", tmp_path / "checkpoints" / "last.pt"
    path.parent.mkdir()
    if zipped:
        torch.save(_state(G=_Payload(marker)), path)
    else:                                    # a plain (non-zip) pickle at checkpoints/last.pt
        with open(path, "wb") as f:
            pickle.dump(_state(G=_Payload(marker)), f)
    if sidecar:
        _write_sidecar(path)
    with pytest.raises(ConfigError) as e:
        ckpt.load(path)
    assert not marker.exists()
    msg = str(e.value)
    assert msg.startswith(f"resume={path}: ") and "\n" not in msg
    if zipped and not sidecar:               # no checksum: refused before anything of it is read
        assert "no last.pt.sha256 beside it" in msg and "nothing was loaded" in msg
        return
    assert "nothing in it was run" in msg and (("(exec)" in msg) if zipped else ("not torch's zip format" in msg))


def test_a_resume_from_a_run_holding_a_payload_is_refused_before_anything(tmp_path):
    """The issue's reproducer through the run directory's checks (what ``resume=RUN`` calls)."""
    run, marker = tmp_path / "run", tmp_path / "marker"
    path = ckpt.atomic_save(_state(extra=_Payload(marker)), ckpt.checkpoint_path(run))
    (run / "metrics.jsonl").write_text('{"iteration": 3}\n')
    before = sorted(p.name for p in run.rglob("*"))
    with pytest.raises(ConfigError, match="nothing in it was run"):
        check_run_dir(tmp_path / "elsewhere", str(run), {"seed": 0})
    assert not marker.exists() and sorted(p.name for p in run.rglob("*")) == before
    assert path.is_file()


def test_a_flipped_bit_in_tensor_data_is_named_corrupt(tmp_path):
    path = ckpt.atomic_save(_state(), tmp_path / "last.pt")
    data = bytearray(path.read_bytes())
    at = data.find(torch.arange(4096.0).numpy().tobytes()) + 4 * 1000 + 2     # inside weight 1000
    assert at > 4 * 1000
    data[at] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as e:
        ckpt.load(path)
    msg = str(e.value)
    assert msg.startswith(f"resume={path}: corrupt checkpoint") and "\n" not in msg and "last good" not in msg
    with torch.serialization.safe_globals(list(files.SAFE_TYPES)):     # the flip is real: another weight
        assert torch.load(path, weights_only=True)["G"]["w"][1000].item() != 1000.0


@pytest.mark.parametrize("keep", [0, 100, 0.5])
def test_a_truncated_checkpoint_is_named_corrupt(tmp_path, keep):
    path = ckpt.atomic_save(_state(), tmp_path / "last.pt")
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep) if isinstance(keep, float) else keep])
    with pytest.raises(ConfigError, match="corrupt checkpoint"):
        ckpt.load(path)
    files.checksum_path(path).write_text(f"{files.file_sha256(path)}  last.pt\n")   # its bytes' checksum
    with pytest.raises(ConfigError, match="not torch's zip format|not a readable checkpoint"):
        ckpt.load(path)                      # verified, but not a checkpoint: still one line


def test_a_checkpoint_without_checksum_is_refused_in_one_line_naming_its_format(tmp_path):
    """The format before checksums (no ``last.pt.sha256``): nothing of it is read, one line says which
    format it is and what to do."""
    path = ckpt.atomic_save(_state(), tmp_path / "last.pt")
    files.checksum_path(path).unlink()
    with pytest.raises(ConfigError) as e:
        ckpt.load(path)
    assert str(e.value).startswith(f"resume={path}: no last.pt.sha256 beside it, which every checkpoint of this code "
                                   "has: a checkpoint of the format before checksums (resume it with the version "
                                   "that wrote it, or start a new run)")
    assert "\n" not in str(e.value)


def test_the_checksum_file_verifies_the_file_on_disk_after_each_save(tmp_path):
    path = tmp_path / "last.pt"
    for i in range(3):
        ckpt.atomic_save(_state(iteration=i), path)
        assert files.read_checksums(path) == [files.file_sha256(path)]
    assert ckpt.load(path)["iteration"] == 2


@pytest.mark.parametrize("change, says", [
    ({"evil": 1}, "holds an entry 'evil' this code never writes"),
    ({"G": [1, 2]}, "entry 'G' is a list, not a dict"),
    ({"noise": "x"}, "entry 'noise' is a str, not a list"),
    ({"window_count": True}, "entry 'window_count' is a bool, not a int"),
    ({"rng": None}, "entry 'rng' is a NoneType, not a dict"),
    ({"iteration": 2.5}, "the checkpoint claims iteration 2.5"),
])
def test_a_checkpoint_with_another_entry_or_type_is_refused(tmp_path, change, says):
    path = ckpt.atomic_save(_state(**change), tmp_path / "last.pt")
    with pytest.raises(ConfigError) as e:
        check_checkpoint(ckpt.load(path), path)
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("change, earlier", [
    ({"run_id": None}, "before run ids: it names no run"),
    ({"config": {"seed": 0, "backend": "local"}}, "before placement=: its backend= key"),
    ({"config": {"seed": 0, "iterations": 3}},
     "before the loop group: top-level iterations, batch_size, ...; now loop.*"),
])
def test_a_checkpoint_of_an_earlier_format_is_refused_in_one_line_naming_it(tmp_path, change, earlier):
    """The formats before run ids, before placement= and before the loop group: refused, not read as today's."""
    state = {**_state(), **change}
    if change == {"run_id": None}:
        del state["run_id"]
    path = ckpt.atomic_save(state, tmp_path / "last.pt")
    with pytest.raises(ConfigError) as e:
        check_checkpoint(ckpt.load(path), path)
    assert str(e.value) == (f"resume={path}: a checkpoint of an earlier format ({earlier}): resume it with the "
                            "version that wrote it, or start a new run")


def test_a_checkpoint_without_an_entry_read_outside_the_state_is_refused_before_anything_is_written(tmp_path):
    """Without ``record_on_grid`` (read when the log is rewound, after the directory is claimed) a
    resume passed every check and then failed with a KeyError traceback."""
    state = {k: v for k, v in _state().items() if k != "record_on_grid"}
    path = ckpt.atomic_save(state, tmp_path / "last.pt")
    with pytest.raises(ConfigError) as e:
        check_checkpoint(ckpt.load(path), path)
    assert "lacks the entry 'record_on_grid'" in str(e.value) and "\n" not in str(e.value)
