"""dadam3.metrics.fmnist_classifier and dadam3.metrics.fidelity on the committed real subset.

The committed classifier runs for real (no mocks of the network or of torch-fidelity);
IS, FID and KID computed by torch-fidelity are compared with the formulas evaluated here on
the classifier's own outputs.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from dadam3.data import TensorImages, build_dataset
from dadam3.errors.config import ConfigError
from dadam3.metrics import fidelity as fdl
from dadam3.metrics import fmnist_classifier as fc
from dadam3.metrics import images as img
from dadam3.metrics.fidelity import fidelity_metrics
from dadam3.metrics.images import UInt8Images, to_uint8_rgb
from dadam3.metrics.spec import FidelitySpec, default_cache_dir
from is_formula import inception_score_from_probs

torch.set_num_threads(1)

SUBSET = Path(__file__).resolve().parent / "data" / "fashion_mnist"
FMNIST = fc.FEATURE_EXTRACTOR_NAME


@pytest.fixture(scope="module")
def subset() -> TensorImages:
    return build_dataset("fashion_mnist", SUBSET, train=False)


@pytest.fixture(scope="module")
def net() -> fc.FashionMNISTClassifier:
    return fc.load_classifier()


@pytest.fixture(scope="module")
def outputs(subset, net) -> tuple[torch.Tensor, torch.Tensor]:
    """(features, logits) of the 1000 subset images, straight from the net."""
    with torch.no_grad():
        return net.features_and_logits(subset.get_batch(torch.arange(len(subset))))


def halves(ds: TensorImages) -> tuple[TensorImages, TensorImages]:
    return (TensorImages(ds.images[:500], ds.labels[:500], ds.name),
            TensorImages(ds.images[500:], ds.labels[500:], ds.name))


# ---------------------------------------------------------------- the committed classifier
def test_packaged_weights_match_checksum_and_are_small() -> None:
    blob = fc.WEIGHTS_PATH.read_bytes()
    assert hashlib.sha256(blob).hexdigest() == fc.WEIGHTS_SHA256
    assert len(blob) < 1_000_000
    state = torch.load(fc.WEIGHTS_PATH, weights_only=True)
    assert all(v.dtype in (torch.float32, torch.int64) for v in state.values())
    assert fc.TEST_ACCURACY >= 0.91


def test_second_scorer_is_another_architecture_with_checked_weights(subset, outputs) -> None:
    """The MLP (metrics.second_extractor=fmnist_mlp): its packaged weights match their hash, it has
    no convolution, it classifies the subset well enough to score with, and its features differ
    from the CNN's."""
    spec = fc.NETS[fc.MLP_NAME]
    assert hashlib.sha256(spec.path.read_bytes()).hexdigest() == spec.sha256 and spec.test_accuracy >= 0.85
    mlp = fc.load_classifier(name=fc.MLP_NAME)
    assert isinstance(mlp, fc.FashionMNISTMLP)
    assert not any(isinstance(m, torch.nn.Conv2d) for m in mlp.modules())
    with torch.no_grad():
        features, logits = mlp.features_and_logits(subset.get_batch(torch.arange(len(subset))))
    assert features.shape == outputs[0].shape
    assert (logits.argmax(1) == subset.labels).double().mean().item() >= 0.85
    assert (logits.argmax(1) == outputs[1].argmax(1)).double().mean().item() < 1.0   # another judge


def test_second_scorer_weights_are_checked(tmp_path) -> None:
    bad = tmp_path / "mlp.pt"
    bad.write_bytes(fc.WEIGHTS_PATH.read_bytes())           # the CNN's weights under the MLP's name
    with pytest.raises(ConfigError, match="dadam3-fmnist-mlp"):
        fc.resolve_weights(bad, fc.MLP_NAME)


def test_accuracy_on_committed_subset(subset, outputs) -> None:
    acc = (outputs[1].argmax(1) == subset.labels).double().mean().item()
    assert acc >= 0.91      # measured 0.934 on these 1000 test images (0.9219 on all 10 000)


def test_extractor_contract_and_input_forms(subset, net, outputs) -> None:
    FE = fc.FeatureExtractorFMNIST
    assert FE.get_provided_features_list() == ("128", "logits")
    assert [FE.get_default_feature_layer_for_metric(m) for m in ("isc", "fid", "kid")] == ["logits", "128", "128"]
    assert FE.can_be_compiled() and FE.get_dummy_input_for_compile().dtype == torch.uint8
    fe = FE(FMNIST, ["logits", "128"])          # torch-fidelity may ask in any order
    x = subset.get_batch(torch.arange(8))
    logits, feats = fe(to_uint8_rgb(x))
    # uint8 RGB (channel repeated) -> [-1, 1] gray is exact, so the outputs are the net's own
    with torch.no_grad():
        ref_feats, ref_logits = net.features_and_logits(x)
    assert torch.equal(feats, ref_feats) and torch.equal(logits, ref_logits)
    assert torch.allclose(logits, outputs[1][:8], atol=1e-4)      # other batch size, other kernels
    assert feats.shape == (8, 128) and (feats >= 0).all()
    assert torch.equal(fc.prepare_images(subset.get_batch(torch.arange(8))), subset.get_batch(torch.arange(8)))
    small = fc.prepare_images(torch.zeros(2, 3, 28, 28, dtype=torch.uint8))
    assert small.shape == (2, 1, 32, 32) and torch.allclose(small, torch.full_like(small, -1.0))
    with pytest.raises(ValueError):
        fc.prepare_images(torch.zeros(2, 2, 32, 32))


# ---------------------------------------------------------------- weights errors
def _never_called(n):
    raise AssertionError("sample_fn must not run when the weights are bad")


@pytest.mark.parametrize("content", [None, b"not a state dict", "truncated"])
def test_bad_weights_file_is_one_line_config_error(tmp_path, content) -> None:
    path = tmp_path / "w.pt"
    if content == "truncated":
        path.write_bytes(fc.WEIGHTS_PATH.read_bytes()[:-10])
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        fidelity_metrics(_never_called, 10, FidelitySpec(batch_size=5, feature_extractor=FMNIST, weights=path))
    msg = str(e.value)
    assert e.value.key == "weights_path" and "\n" not in msg
    assert msg.startswith(f"weights_path={path}: ")
    assert ("not found" in msg) if content is None else (fc.WEIGHTS_SHA256 in msg)
    with pytest.raises(ConfigError):
        fc.FeatureExtractorFMNIST(FMNIST, ["logits"], feature_extractor_weights_path=str(path))


def test_unknown_feature_extractor() -> None:
    with pytest.raises(ConfigError, match=r"^feature_extractor=vgg: unknown feature extractor; allowed: "
                                          r"inception-v3-compat, dadam3-fmnist-classifier, dadam3-fmnist-mlp$"):
        fidelity_metrics(_never_called, 10, FidelitySpec(batch_size=5, feature_extractor="vgg"))


# ---------------------------------------------------------------- torch-fidelity with it
def test_is_through_torch_fidelity_equals_formula_on_logits(subset, outputs, tmp_path) -> None:
    out = fdl.image_fidelity_metrics(subset, FidelitySpec(batch_size=250, feature_extractor=FMNIST, splits=4,
                                                    cache_root=tmp_path))
    perm = np.random.RandomState(2020).permutation(len(subset))   # torch-fidelity's shuffle (rng_seed 2020)
    mean, std = inception_score_from_probs(outputs[1][perm].double().softmax(1), splits=4)
    assert set(out) == {"is_mean", "is_std"}
    assert out["is_mean"] == pytest.approx(mean, rel=1e-6) and out["is_std"] == pytest.approx(std, rel=1e-4, abs=1e-6)
    assert 5 < out["is_mean"] <= 10       # ten balanced classes, confidently classified


def _fid_by_hand(f1: torch.Tensor, f2: torch.Tensor) -> float:
    a, b = f1.double(), f2.double()
    mu1, mu2 = a.mean(0), b.mean(0)
    s1, s2 = torch.cov(a.T), torch.cov(b.T)
    w, v = torch.linalg.eigh(s1)
    root1 = v @ torch.diag(w.clamp(min=0).sqrt()) @ v.T
    tr_covmean = torch.linalg.eigvalsh(root1 @ s2 @ root1).clamp(min=0).sqrt().sum()
    return float((mu1 - mu2).square().sum() + s1.trace() + s2.trace() - 2 * tr_covmean)


def _kid_by_hand(f1: torch.Tensor, f2: torch.Tensor) -> float:
    """Unbiased MMD² with the cubic polynomial kernel (x·y/d + 1)³ (Bińkowski et al. 2018)."""
    a, b = f1.double(), f2.double()
    m, d = a.shape
    k = lambda x, y: (x @ y.T / d + 1) ** 3
    kxx, kyy, kxy = k(a, a), k(b, b), k(a, b)
    return float((kxx.sum() - kxx.trace()) / (m * (m - 1)) + (kyy.sum() - kyy.trace()) / (m * (m - 1))
                 - 2 * kxy.mean())


def test_fid_kid_through_torch_fidelity_equal_formulas(subset, outputs, tmp_path) -> None:
    first, second = halves(subset)
    out = fdl.image_fidelity_metrics(first, FidelitySpec(batch_size=250, feature_extractor=FMNIST, isc=False, fid=True,
                                                         kid=True, cache_root=tmp_path, extra={"kid_subsets": 3}),
                                     reference=second)
    f1, f2 = outputs[0][:500], outputs[0][500:]
    assert out["fid"] == pytest.approx(_fid_by_hand(f1, f2), rel=1e-4, abs=1e-3)
    # subsets of all 500 samples are permutations, and the unbiased MMD² ignores the order;
    # torch-fidelity's kernel matrices are float32 with entries ~19, so agreement to ~1e-5
    assert out["kid_mean"] == pytest.approx(_kid_by_hand(f1, f2), abs=1e-4)
    assert out["kid_std"] == pytest.approx(0.0, abs=1e-4)
    assert out["fid"] > 0.01    # two halves of the same test set: close, but not identical
    same = fdl.image_fidelity_metrics(first, FidelitySpec(batch_size=250, feature_extractor=FMNIST, isc=False, fid=True,
                                                          cache_root=tmp_path), reference=first)
    assert abs(same["fid"]) < 1e-3 * out["fid"] + 1e-4


def test_reference_features_are_cached_and_reused(subset, tmp_path, monkeypatch) -> None:
    seen = []
    real_forward = fc.FeatureExtractorFMNIST.forward

    def counting_forward(self, x):
        seen.append(x.shape[0])
        return real_forward(self, x)

    monkeypatch.setattr(fc.FeatureExtractorFMNIST, "forward", counting_forward)
    first, second = halves(subset)
    noise = lambda n: torch.rand(n, 1, 32, 32) * 2 - 1
    spec = FidelitySpec(batch_size=100, feature_extractor=FMNIST, isc=True, fid=True, kid=True, splits=2,
                        cache_root=tmp_path, extra={"kid_subsets": 2})
    kw = dict(reference=second)
    a = fidelity_metrics(noise, 300, spec, seed=1, **kw)
    assert sum(seen) == 300 + 500                      # generated + reference
    name = fdl.dataset_cache_name(second, FMNIST)
    assert name.startswith("dadam3-fashion_mnist-500x1x32x32-") and name.endswith(f"-w{fc.WEIGHTS_SHA256[:12]}")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{name}-{FMNIST}-features-{layer}.pt" for layer in ("128", "logits")]
        + [f"{name}-{FMNIST}-stat-fid-128.pt"])
    seen.clear()
    b = fidelity_metrics(noise, 300, spec, seed=1, **kw)
    assert sum(seen) == 300 and a == b                 # reference read from the cache
    seen.clear()
    other = TensorImages(second.images.flip(-1), second.labels, second.name)   # same name, other pixels
    fidelity_metrics(noise, 300, spec, seed=1, **{**kw, "reference": other})
    assert sum(seen) == 300 + 500 and fdl.dataset_cache_name(other, FMNIST) != name
    assert a["is_mean"] < 3 and a["fid"] > 10 * _fid_by_hand(*[fc.load_classifier().features_and_logits(
        h.get_batch(torch.arange(500)))[0] for h in halves(subset)])   # noise is far from clothes


def test_uint8_images_of_tensor_images_equals_item_conversion(subset) -> None:
    fast = img.uint8_images(subset)
    slow = img._UInt8View(subset)
    assert isinstance(fast, UInt8Images) and len(fast) == len(slow) == 1000
    for i in (0, 5, 999):
        assert fast[i].dtype == torch.uint8 and fast[i].shape == (3, 32, 32)
        assert torch.equal(fast[i], slow[i]) and torch.equal(fast[i][0], subset.images[i][0])
    with pytest.raises(ValueError):
        img.uint8_images(torch.zeros(3, 1, 4, 4))


def test_default_cache_dir(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("DADAM3_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == str(tmp_path / ".cache" / "dadam3")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == str(tmp_path / "xdg" / "dadam3")
    monkeypatch.setenv("DADAM3_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == str(tmp_path / "c")


def test_metric_arg_checks_apply_to_fixed_images(subset) -> None:
    with pytest.raises(ConfigError) as e:
        fdl.image_fidelity_metrics(subset, FidelitySpec(batch_size=10, feature_extractor=FMNIST, splits=1001))
    assert e.value.key == "splits"
    with pytest.raises(ConfigError) as e:
        fdl.image_fidelity_metrics(subset, FidelitySpec(batch_size=10, feature_extractor=FMNIST, isc=False, kid=True))
    assert e.value.key == "reference"
    assert math.isfinite(fdl.image_fidelity_metrics(UInt8Images(to_uint8_rgb(torch.zeros(4, 1, 32, 32))),
                                                    FidelitySpec(batch_size=4, feature_extractor=FMNIST,
                                                                 splits=1))["is_mean"])


# ---------------------------------------------------------------- the trainer's evaluation hook
def test_evaluation_hook_scores_every_node_and_the_averaged_model(tmp_path) -> None:
    """The hook (metrics/evaluation.py, fed by gan/samples.py's GeneratorDraws) equals
    fidelity_metrics called by hand on each node's generator and on the node-averaged one."""
    from dadam3.run.schema import train_settings
    from dadam3.train import build_trainer
    from trainer_runs import config

    s = train_settings(config(["dataset=fake", "dataset.length=64", "model=dcgan32", "model.width=0.03125",
                               "nodes=2", "loop.batch_size=2", "device=cpu", "loop.progress=false", "loop.iterations=2",
                               "metrics.every=1", "metrics.samples=10", "metrics.inception=true",
                               "metrics.fid=true", "metrics.feature_extractor=fmnist_classifier",
                               f"metrics.cache_dir={tmp_path / 'cache'}"]))
    t = build_trainer(s, tmp_path / "run")
    G = t.G
    for p in G.parameters():          # nodes that differ, so the averaged model is a third one
        p.data.add_(0.1 * torch.randn_like(p))
    rec = t.evaluate.score(G, 1)
    spec = FidelitySpec(batch_size=s.metrics.batch_size, feature_extractor=FMNIST, isc=True, fid=True,
                        cache_root=tmp_path / "cache")
    nz = G.in_shape[0]
    nets = [G.node_module(i).eval() for i in range(G.num_nodes)] + [G.averaged_module().eval()]
    by_hand = [fidelity_metrics(lambda b, net=net: net(torch.randn(b, nz)), 10, spec, reference=t.sampler.dataset)
               for net in nets]
    assert rec["is_nodes"] == [h["is_mean"] for h in by_hand[:2]] and rec["is_avg_model"] == by_hand[2]["is_mean"]
    assert rec["fid_nodes"] == [h["fid"] for h in by_hand[:2]] and rec["fid_avg_model"] == by_hand[2]["fid"]
    assert rec["is_mean"] == sum(rec["is_nodes"]) / 2 and rec["is_avg_model_std"] == by_hand[2]["is_std"]
    assert rec["fid_nodes"][0] != rec["fid_nodes"][1]          # two different generators were scored


def test_evaluation_hook_scores_again_under_the_second_scorer(tmp_path) -> None:
    """metrics.second_extractor=fmnist_mlp: IS and FID again, from the same images, under the MLP,
    each key suffixed _fmnist_mlp (KID only under the first scorer); the first scorer's keys are
    what they are without it."""
    from dadam3.run.schema import train_settings
    from dadam3.train import build_trainer
    from trainer_runs import config

    common = ["dataset=fake", "dataset.length=64", "model=dcgan32", "model.width=0.03125", "nodes=2",
              "loop.batch_size=2", "device=cpu", "loop.progress=false", "loop.iterations=2", "metrics.every=1",
              "metrics.samples=10", "metrics.inception=true", "metrics.fid=true",
              "metrics.feature_extractor=fmnist_classifier", f"metrics.cache_dir={tmp_path / 'cache'}"]
    recs = []
    for extra, run in (([], "one"), (["metrics.second_extractor=fmnist_mlp"], "two")):
        torch.manual_seed(0)
        t = build_trainer(train_settings(config(common + extra)), tmp_path / run)
        recs.append(t.evaluate.score(t.G, 1))
    one, two = recs
    assert {k: v for k, v in two.items() if not k.endswith("_fmnist_mlp")} == one
    assert set(two) - set(one) == {f"{k}_fmnist_mlp" for k in one if not k.startswith("kid")}
    assert two["fid_mean_fmnist_mlp"] != two["fid_mean"]
