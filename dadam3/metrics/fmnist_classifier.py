"""Two small Fashion-MNIST classifiers, registered as torch-fidelity feature extractors.

InceptionV3 was trained on ImageNet photographs; on 32×32 grayscale clothes its features
and its 1008 classes say little. This net is trained on Fashion-MNIST itself
(``scripts/train_fmnist_classifier.py``, test accuracy in :data:`TEST_ACCURACY`) and judges
generated Fashion-MNIST images the way InceptionV3 judges photographs: torch-fidelity's own
``calculate_metrics`` computes

* IS from its class ``"logits"`` (softmax = p(y|x), 10 classes, so IS ∈ [1, 10]),
* FID and KID from its penultimate features ``"128"`` (after the ReLU, as Inception's 2048),

under the feature extractor name :data:`FEATURE_EXTRACTOR_NAME` (registered on import).

Network (input 1×32×32 in [-1, 1], what the generators and ``dataset=fashion_mnist`` give)::

    3 × [conv 3×3 (pad 1, no bias) → BatchNorm → ReLU → max-pool 2]   16, 32, 64 channels
    flatten 64·4·4 → linear 128 → ReLU   ("128": the features)   → dropout → linear 10 ("logits")

A second scorer of another architecture, :class:`FashionMNISTMLP` (:data:`MLP_NAME`), so that a
verdict can be checked against the choice of feature extractor: no convolution, no pooling, no
batch norm, on the flattened pixels::

    flatten 32·32 → linear 256 → ReLU → linear 128 → ReLU ("128": the features) → dropout → linear 10

Weights: ``weights/fmnist_classifier.pt`` and ``weights/fmnist_mlp.pt`` (float32 state dicts)
shipped inside the package, both made by ``scripts/train_fmnist_classifier.py`` (``--net cnn|mlp``).
Every load checks the file's SHA-256 against its entry in :data:`NETS`, also for a file given
explicitly: torch-fidelity caches reference features under the extractor's name, so one
name must always mean the same weights. A retrained net means a new hash here.
"""
from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_fidelity.feature_extractor_base import FeatureExtractorBase
from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY, register_feature_extractor

from dadam3.errors.config import ConfigError
from dadam3.metrics.spec import FMNIST_CLASSIFIER, FMNIST_MLP

FEATURE_EXTRACTOR_NAME = FMNIST_CLASSIFIER        # spelled once, in dadam3.metrics.spec
MLP_NAME = FMNIST_MLP
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
WEIGHTS_PATH = WEIGHTS_DIR / "fmnist_classifier.pt"
WEIGHTS_SHA256 = "e247bbb52ce3f2f6789e6c4d371ca3f48bbddf27bb9bd47fff60e061668a37af"
TEST_ACCURACY = 0.9219       # on the 10 000 test images (scripts/train_fmnist_classifier.py)
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
IMAGE_SIZE = 32
FEATURE_DIM = 128
FEATURES = (str(FEATURE_DIM), "logits")


class FashionMNISTClassifier(nn.Module):
    """The classifier; ``forward`` gives the logits, :meth:`features_and_logits` both outputs."""

    def __init__(self, channels: tuple[int, int, int] = (16, 32, 64), feature_dim: int = FEATURE_DIM,
                 dropout: float = 0.3):
        super().__init__()
        blocks, c_in = [], 1
        for c in channels:
            blocks += [nn.Conv2d(c_in, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
                       nn.MaxPool2d(2)]
            c_in = c
        self.convs = nn.Sequential(*blocks)
        side = IMAGE_SIZE // 2 ** len(channels)
        self.fc = nn.Linear(c_in * side * side, feature_dim)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(feature_dim, len(CLASSES))

    def features_and_logits(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x``: float ``N×1×32×32`` in [-1, 1] → (features ``N×128``, logits ``N×10``)."""
        f = F.relu(self.fc(self.convs(x).flatten(1)))
        return f, self.head(self.dropout(f))

    def forward(self, x: Tensor) -> Tensor:
        return self.features_and_logits(x)[1]


class FashionMNISTMLP(nn.Module):
    """The second scorer: a multi-layer perceptron on the flattened 32×32 pixels."""

    def __init__(self, hidden: int = 256, feature_dim: int = FEATURE_DIM, dropout: float = 0.3):
        super().__init__()
        self.fc1 = nn.Linear(IMAGE_SIZE * IMAGE_SIZE, hidden)
        self.fc2 = nn.Linear(hidden, feature_dim)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(feature_dim, len(CLASSES))

    def features_and_logits(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x``: float ``N×1×32×32`` in [-1, 1] → (features ``N×128``, logits ``N×10``)."""
        f = F.relu(self.fc2(F.relu(self.fc1(x.flatten(1)))))
        return f, self.head(self.dropout(f))

    def forward(self, x: Tensor) -> Tensor:
        return self.features_and_logits(x)[1]


class Net(NamedTuple):
    """One scorer: its class, packaged weights, their SHA-256 and the test accuracy they reached."""
    cls: type
    path: Path
    sha256: str
    test_accuracy: float


# torch-fidelity name -> the net behind it; retrained weights mean a new hash and accuracy here
NETS = {
    FEATURE_EXTRACTOR_NAME: Net(FashionMNISTClassifier, WEIGHTS_PATH, WEIGHTS_SHA256, TEST_ACCURACY),
    MLP_NAME: Net(FashionMNISTMLP, WEIGHTS_DIR / "fmnist_mlp.pt",
                  "d4ffc37b0dfd65e37aabffc9c3ebd31d86a3ea693a2de87711a0595d356a19ff", 0.8766),
}
# the command-line name of each net (scripts/train_fmnist_classifier.py --net)
NET_FLAGS = {"cnn": FEATURE_EXTRACTOR_NAME, "mlp": MLP_NAME}


def prepare_images(x: Tensor) -> Tensor:
    """Any image batch the metrics see → float32 ``N×1×32×32`` in [-1, 1].

    * uint8 ``N×C×H×W`` in [0, 255] (torch-fidelity's inputs; ``to_uint8_rgb`` repeats a
      grayscale channel three times): channels averaged (exact for repeated channels) and
      mapped with ToTensor + Normalize(0.5, 0.5), so a dataset image round-trips bit for bit;
    * float ``N×C×H×W`` in [-1, 1] (a generator's output): channels averaged.

    Other sizes are resized bilinearly (antialiased) to 32×32.
    """
    if x.dim() != 4 or x.shape[1] not in (1, 3):
        raise ValueError(f"expected N×C×H×W images with C in (1, 3), got shape {tuple(x.shape)}")
    if x.dtype == torch.uint8:       # average the integer levels first: exact for repeated channels
        x = x.to(torch.float32)
        x = (x.mean(dim=1, keepdim=True) if x.shape[1] == 3 else x).div_(255).sub_(0.5).div_(0.5)
    elif x.is_floating_point():
        x = x.to(torch.float32)
        x = x.mean(dim=1, keepdim=True) if x.shape[1] == 3 else x
    else:
        raise ValueError(f"expected uint8 or floating-point images, got {x.dtype}")
    if tuple(x.shape[-2:]) != (IMAGE_SIZE, IMAGE_SIZE):
        x = F.interpolate(x, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", antialias=True,
                          align_corners=False)
    return x


def sha256_of(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def resolve_weights(weights_path: str | os.PathLike | None = None, name: str = FEATURE_EXTRACTOR_NAME) -> str:
    """The weights file of net ``name`` (default: the packaged one) after its SHA-256 check, or a
    one-line ConfigError."""
    net = NETS[name]
    path = Path(os.path.expanduser(str(weights_path))) if weights_path is not None else net.path
    shown = str(weights_path) if weights_path is not None else None
    if not path.is_file():
        raise ConfigError("weights_path", shown,
                          f"Fashion-MNIST classifier weights not found at {path} ({name}); they ship with dadam3 "
                          "(reinstall it) or are made by scripts/train_fmnist_classifier.py")
    digest = sha256_of(path)
    if digest != net.sha256:
        raise ConfigError("weights_path", shown,
                          f"{path} has SHA-256 {digest}, expected {net.sha256} (the weights "
                          f"dadam3's Fashion-MNIST metrics ({name}) refer to); restore the packaged file")
    return str(path)


def load_classifier(weights_path: str | os.PathLike | None = None, name: str = FEATURE_EXTRACTOR_NAME) -> nn.Module:
    """The trained net ``name`` in eval mode, no gradients, on the CPU (checksum checked first)."""
    path = resolve_weights(weights_path, name)
    net = NETS[name].cls()
    net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return net.requires_grad_(False).eval()


def state_dict_bytes(net: nn.Module) -> bytes:
    """The float32 state dict serialised by ``torch.save`` (same tensors → same bytes)."""
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu().clone() for k, v in net.state_dict().items()}, buf)
    return buf.getvalue()


class FeatureExtractorFMNIST(FeatureExtractorBase):
    """torch-fidelity's view of a net of :data:`NETS` (by its registered ``name``): features
    ``"128"`` and ``"logits"``."""

    def __init__(self, name: str, features_list, feature_extractor_weights_path=None, **kwargs):
        super().__init__(name, features_list)
        self.net = load_classifier(feature_extractor_weights_path, name)
        self.requires_grad_(False)
        self.eval()

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        features, logits = self.net.features_and_logits(prepare_images(x))
        out = {FEATURES[0]: features, FEATURES[1]: logits}
        return tuple(out[name] for name in self.features_list)

    @staticmethod
    def get_provided_features_list():
        return FEATURES

    @staticmethod
    def get_default_feature_layer_for_metric(metric):
        return {"isc": "logits", "fid": FEATURES[0], "kid": FEATURES[0], "prc": FEATURES[0]}[metric]

    @staticmethod
    def can_be_compiled():
        return True

    @staticmethod
    def get_dummy_input_for_compile():
        return (torch.rand([1, 3, IMAGE_SIZE, IMAGE_SIZE]) * 255).to(torch.uint8)


for _name in NETS:
    if _name not in FEATURE_EXTRACTORS_REGISTRY:
        register_feature_extractor(_name, FeatureExtractorFMNIST)
