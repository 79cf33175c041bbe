import math
import os
import urllib.error

import pytest
import torch

from dadam3.errors.config import ConfigError
from dadam3.metrics import consensus_distance
from dadam3.metrics import images as img
from dadam3.metrics import inception as inc
from dadam3.metrics.fidelity import fidelity_metrics
from dadam3.metrics.spec import FidelitySpec

import is_formula
from trainer_runs import cli

# ---------------------------------------------------------------- consensus distance

def test_consensus_distance_hand_computed():
    # M = 2 nodes, x = [0, 2] and [2, 4] -> mean [1, 3]; each node is off by ±1 per coordinate.
    x = torch.tensor([[0.0, 2.0], [2.0, 4.0]])
    assert consensus_distance([x]) == pytest.approx((1 + 1 + 1 + 1) / 2)
    # a second tensor: M = 2 scalars 1 and 5 -> mean 3, (4 + 4) / 2 = 4 added
    assert consensus_distance([x, torch.tensor([1.0, 5.0])]) == pytest.approx(2.0 + 4.0)


def test_consensus_distance_matches_loop_reference():
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(5, 3, 4, generator=g, dtype=torch.float64),
              torch.randn(5, 7, generator=g, dtype=torch.float64)]
    m = 5
    ref = 0.0
    for p in params:
        mean = sum(p[i] for i in range(m)) / m
        ref += sum(float(((p[i] - mean) ** 2).sum()) for i in range(m)) / m
    assert consensus_distance(params) == pytest.approx(ref, rel=1e-12)


def test_consensus_distance_zero_at_consensus_and_empty():
    same = torch.randn(1, 6).expand(4, 6)
    assert consensus_distance([same]) == pytest.approx(0.0, abs=1e-12)
    assert consensus_distance([]) == 0.0


def test_consensus_distance_rejects_mismatched_node_axes():
    with pytest.raises(ValueError, match="node axes differ"):
        consensus_distance([torch.zeros(3, 2), torch.zeros(4, 2)])


# ---------------------------------------------------------------- IS formula

def test_is_uniform_predictions_is_one():
    mean, std = is_formula.inception_score_from_probs(torch.full((40, 10), 0.1), splits=4)
    assert mean == pytest.approx(1.0) and std == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("splits", [1, 3])
def test_is_confident_distinct_classes_equally_used_is_k(splits):
    k = 7
    probs = torch.eye(k).repeat(splits, 1)  # each split holds every class once
    mean, std = is_formula.inception_score_from_probs(probs, splits=splits)
    assert mean == pytest.approx(k) and std == pytest.approx(0.0, abs=1e-9)


def test_is_two_samples_by_hand():
    probs = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    marginal = [0.75, 0.25]
    kl1 = math.log(1 / marginal[0])
    kl2 = 0.5 * math.log(0.5 / marginal[0]) + 0.5 * math.log(0.5 / marginal[1])
    mean, std = is_formula.inception_score_from_probs(probs, splits=1)
    assert mean == pytest.approx(math.exp((kl1 + kl2) / 2), rel=1e-12) and std == 0.0


@pytest.mark.parametrize("n,k,splits", [(200, 17, 10), (203, 1008, 7), (50, 5, 1)])
def test_is_agrees_with_torch_fidelity(n, k, splits):
    from torch_fidelity.metric_isc import isc_features_to_metric

    logits = torch.randn(n, k, generator=torch.Generator().manual_seed(n), dtype=torch.float64) * 3
    ours = is_formula.inception_score_from_probs(logits.softmax(dim=1), splits=splits)
    theirs = isc_features_to_metric(logits, splits=splits, shuffle=False)
    assert ours[0] == pytest.approx(theirs["inception_score_mean"], rel=1e-10)
    assert ours[1] == pytest.approx(theirs["inception_score_std"], rel=1e-8, abs=1e-12)


def test_is_bad_splits_is_config_error():
    with pytest.raises(ConfigError, match=r"^splits=11: must be in \[1, 10\]"):
        is_formula.inception_score_from_probs(torch.full((10, 3), 1 / 3), splits=11)


# ---------------------------------------------------------------- images -> uint8

def test_to_uint8_rgb_levels_clamp_and_gray_to_rgb():
    x = torch.tensor([-1.0, 0.0, 1.0, -3.0, 2.0]).reshape(1, 1, 1, 5)
    out = img.to_uint8_rgb(x)
    assert out.dtype == torch.uint8 and out.shape == (1, 3, 1, 5)
    assert out[0, 0, 0].tolist() == [0, 128, 255, 0, 255]
    assert torch.equal(out[:, 0], out[:, 1]) and torch.equal(out[:, 0], out[:, 2])
    rgb = torch.rand(2, 3, 4, 4) * 2 - 1
    assert img.to_uint8_rgb(rgb).shape == (2, 3, 4, 4)
    with pytest.raises(ValueError):
        img.to_uint8_rgb(torch.zeros(2, 2, 4, 4))


# ---------------------------------------------------------------- missing weights

@pytest.fixture
def empty_torch_home(tmp_path, monkeypatch):
    home = tmp_path / "torch_home"
    monkeypatch.setenv("TORCH_HOME", str(home))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)  # in case someone called torch.hub.set_dir
    return home


def _never_called(n):
    raise AssertionError("sample_fn must not run when the weights are missing")


def test_weights_url_and_cache_path(empty_torch_home):
    assert inc.INCEPTION_WEIGHTS_URL == ("https://github.com/toshas/torch-fidelity/releases/download/"
                                         "v0.2.0/weights-inception-2015-12-05-6726825d.pth")
    assert inc.inception_weights_cache_path() == os.path.join(
        str(empty_torch_home), "hub", "checkpoints", "weights-inception-2015-12-05-6726825d.pth")


def test_missing_weights_offline_download_is_one_line_config_error(empty_torch_home, monkeypatch):
    def offline(url, dst, *args, **kwargs):
        assert url == inc.INCEPTION_WEIGHTS_URL and dst == inc.inception_weights_cache_path()
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    with pytest.raises(ConfigError) as e:
        fidelity_metrics(_never_called, num_samples=10, spec=FidelitySpec(batch_size=5), device="cpu")
    msg = str(e.value)
    assert e.value.key == "weights_path" and "\n" not in msg
    assert msg.startswith("weights_path=None: Inception weights not found")
    assert inc.INCEPTION_WEIGHTS_URL in msg and inc.inception_weights_cache_path() in msg
    assert "URLError" in msg and "weights_path=PATH" in msg
    assert not empty_torch_home.exists()  # nothing created, nothing left behind


def test_missing_weights_without_download(empty_torch_home, monkeypatch):
    monkeypatch.setattr(torch.hub, "download_url_to_file", lambda *a, **k: pytest.fail("downloaded"))
    with pytest.raises(ConfigError, match="downloads disabled"):
        fidelity_metrics(_never_called, 10, FidelitySpec(batch_size=5, download=False))


def test_explicit_missing_weights_path(tmp_path):
    bad = tmp_path / "nope.pth"
    with pytest.raises(ConfigError) as e:
        fidelity_metrics(_never_called, 10, FidelitySpec(batch_size=5, weights=str(bad)))
    assert str(e.value).startswith(f"weights_path={bad}: Inception weights not found")
    assert "\n" not in str(e.value)


def test_cached_weights_are_found_without_download(empty_torch_home, monkeypatch):
    monkeypatch.setattr(torch.hub, "download_url_to_file", lambda *a, **k: pytest.fail("downloaded"))
    cached = inc.inception_weights_cache_path()
    os.makedirs(os.path.dirname(cached))
    open(cached, "wb").close()
    assert inc.resolve_inception_weights() == cached


@pytest.mark.parametrize("kwargs,key", [({"num_samples": 0}, "num_samples"),
                                        ({"batch_size": -1}, "batch_size"),
                                        ({"splits": 20}, "splits"),
                                        ({"fid": True}, "reference")])
def test_bad_metric_config(kwargs, key):
    args = {"num_samples": 10, "batch_size": 5, **kwargs}
    num_samples = args.pop("num_samples")
    with pytest.raises(ConfigError) as e:
        fidelity_metrics(_never_called, num_samples, FidelitySpec(**args))
    assert e.value.key == key


# ---------------------------------------------------------------- the real torch-fidelity path

@pytest.mark.slow
def test_pipeline_through_torch_fidelity_with_untrained_inception(tmp_path, monkeypatch):
    """Plumbing only: torch-fidelity's real InceptionV3 with PyTorch's default random init.

    The numbers are meaningless (no trained weights here), so only their type and range are
    checked, plus what reached the network: uint8, N×3×H×W, every requested sample.
    """
    from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3 as FE

    monkeypatch.setattr(FE, "load_state_dict", lambda self, state_dict, *a, **k: None)
    seen = []
    real_forward = FE.forward

    def spy_forward(self, x):
        seen.append((x.dtype, tuple(x.shape)))
        return real_forward(self, x)

    monkeypatch.setattr(FE, "forward", spy_forward)
    weights = tmp_path / "empty.pth"
    torch.save({inc.INCEPTION_FIRST_KEY: torch.zeros(1)}, weights)
    calls = []

    def sample_fn(n):
        calls.append(n)
        return torch.rand(n, 1, 28, 28) * 2 - 1  # MNIST-like grayscale in [-1, 1]

    reference = img.UInt8Images(img.to_uint8_rgb(torch.rand(2, 1, 28, 28) * 2 - 1))
    # One batch shape throughout (the first forward per shape is the slow one on CPU), and
    # KID rather than FID: FID's eigvals of a 2048x2048 matrix alone takes ~15 s on 2 cores;
    # both go through the same input2 plumbing.
    out = fidelity_metrics(sample_fn, num_samples=4, device="cpu", reference=reference,
                           spec=FidelitySpec(batch_size=2, weights=weights, kid=True, splits=2))
    assert calls == [2, 2]
    assert set(out) == {"is_mean", "is_std", "kid_mean", "kid_std"}
    assert all(math.isfinite(v) for v in out.values())
    assert 1.0 - 1e-9 <= out["is_mean"] <= 1008  # torch-fidelity's IS uses 1008 logits
    assert sum(s[0] for _, s in seen) == 4 + 2
    assert all(dtype == torch.uint8 and shape[1:] == (3, 28, 28) for dtype, shape in seen)


def test_garbage_inception_weights_stop_the_run_at_start(tmp_path):
    garbage = tmp_path / "inception.pth"
    garbage.write_bytes(b"not weights" * 100)
    r = cli("dataset=fake", "dataset.length=64", "model.width=0.03125", "nodes=2", "loop.batch_size=2", "device=cpu",
            "metrics.inception=true", "metrics.every=2", f"metrics.inception_weights={garbage}", "loop.iterations=2",
            "loop.progress=false", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith(f"error: metrics.inception_weights={garbage}: not torch-fidelity's Inception weights")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
