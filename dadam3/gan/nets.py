"""The paper's generator/critic pairs as ordinary ``nn.Module``s (Section 5.3).

Tables 2–3 (MNIST, CIFAR-10/100, 32×32)::

    G: ConvT(nz,1024,4,1,0)+BN+ReLU → ConvT(1024,512,4,2,1)+BN+ReLU
       → ConvT(512,256,4,2,1)+BN+ReLU → ConvT(256,C,4,2,1)+Tanh
    D: Conv(C,256,4,2,1)+IN+LReLU(0.2) → Conv(256,512,4,2,1)+IN+LReLU(0.2)
       → Conv(512,1024,4,2,1)+IN+LReLU(0.2) → Conv(1024,1,4,1,0)

Tables 4–5 (CelebA, Imagenette, 64×64)::

    G: ConvT(nz,512,4,1,0) → (512,256) → (256,128) → (128,64), each +BN+ReLU,
       → ConvT(64,C,4,2,1)+Tanh
    D: Conv(C,64,4,2,1)+IN+LReLU(0.2) → (64,128) → (128,256) → (256,512) → Conv(512,1,4,1,0)

plus a small ReLU MLP pair for 2-D toy data.  Every net is a :class:`SequentialNet`:
a flat ``nn.Sequential`` of standard layers between two reshapes, which is what
:mod:`dadam3.gan.stacked` turns into one batched computation over M nodes.

Where the paper is silent we choose (all switchable through :func:`build_nets`):

* no bias in a conv that feeds a norm layer (BatchNorm/InstanceNorm subtract the
  per-channel mean, so such a bias is a dead parameter); bias in the last layer;
* ``InstanceNorm2d(affine=True)`` without running statistics, as in the public
  WGAN-GP code whose nets coincide with Tables 2–3;
* DCGAN initialisation for the image nets (Radford et al. 2016): conv weights
  ~ N(0, 0.02), norm scales ~ N(1, 0.02), biases 0; PyTorch's default for the MLP.
"""
from __future__ import annotations

from typing import Sequence

import torch.nn as nn

from dadam3.errors.config import ConfigError, check_int

ARCHS = ("dcgan32", "dcgan64", "mlp")

# Output channels of the hidden layers at width 1 (Tables 2–5); the critic's run in reverse.
DCGAN32_CHANNELS = (1024, 512, 256)
DCGAN64_CHANNELS = (512, 256, 128, 64)
DEFAULT_NZ = {"dcgan32": 100, "dcgan64": 100, "mlp": 8}
MLP_HIDDEN = 128          # the MLP pair's hidden width (model=mlp's too: tests/test_gan.py checks)
INITS = ("dcgan", "default")


class SequentialNet(nn.Module):
    """``layers`` (an ``nn.Sequential``) between two reshapes.

    ``forward`` maps ``[B, *in_shape] → [B, *out_shape]``: a generator has
    ``in_shape=(nz, 1, 1)`` (so it takes ``z`` as ``[B, nz]``) and a critic has
    ``out_shape=()`` (one score per sample, ``[B]``).
    """

    def __init__(self, layers: Sequence[nn.Module], in_shape: Sequence[int],
                 out_shape: Sequence[int]):
        super().__init__()
        self.layers = nn.Sequential(*layers)
        self.in_shape = tuple(int(s) for s in in_shape)
        self.out_shape = tuple(int(s) for s in out_shape)

    def forward(self, x):
        batch = x.shape[0]
        return self.layers(x.reshape(batch, *self.in_shape)).reshape(batch, *self.out_shape)

    def extra_repr(self) -> str:
        return f"in_shape={self.in_shape}, out_shape={self.out_shape}"


def scaled_channels(channels: int, width: float) -> int:
    """``channels · width`` rounded, at least 1."""
    return max(1, int(round(channels * width)))


def dcgan_generator(hidden: Sequence[int], channels: int, nz: int,
                    bias_before_norm: bool = False) -> SequentialNet:
    """ConvT(nz,h0,4,1,0)+BN+ReLU, then ConvT(h_{i-1},h_i,4,2,1)+BN+ReLU, then ConvT(h_last,C,4,2,1)+Tanh.

    Spatial size 4 after the first layer, doubled by each later one: 4·2^len(hidden).
    """
    layers: list[nn.Module] = []
    c_in = nz
    for i, c_out in enumerate(hidden):
        stride, padding = (1, 0) if i == 0 else (2, 1)
        layers += [nn.ConvTranspose2d(c_in, c_out, 4, stride, padding, bias=bias_before_norm),
                   nn.BatchNorm2d(c_out), nn.ReLU()]
        c_in = c_out
    layers += [nn.ConvTranspose2d(c_in, channels, 4, 2, 1), nn.Tanh()]
    size = 4 * 2 ** len(hidden)
    return SequentialNet(layers, (nz, 1, 1), (channels, size, size))


def dcgan_critic(hidden: Sequence[int], channels: int, bias_before_norm: bool = False,
                 instance_norm_affine: bool = True) -> SequentialNet:
    """Conv(C,h0,4,2,1)+IN+LReLU(0.2), …, Conv(h_last,1,4,1,0): image → one score."""
    layers: list[nn.Module] = []
    c_in = channels
    for c_out in hidden:
        layers += [nn.Conv2d(c_in, c_out, 4, 2, 1, bias=bias_before_norm),
                   nn.InstanceNorm2d(c_out, affine=instance_norm_affine),
                   nn.LeakyReLU(0.2)]
        c_in = c_out
    layers += [nn.Conv2d(c_in, 1, 4, 1, 0)]
    size = 4 * 2 ** len(hidden)
    return SequentialNet(layers, (channels, size, size), ())


def mlp_generator(nz: int, hidden: int, data_dim: int = 2) -> SequentialNet:
    """z → Linear+ReLU → Linear+ReLU → Linear → x ∈ R^data_dim."""
    layers = [nn.Linear(nz, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
              nn.Linear(hidden, data_dim)]
    return SequentialNet(layers, (nz,), (data_dim,))


def mlp_critic(hidden: int, data_dim: int = 2) -> SequentialNet:
    """x → Linear+ReLU → Linear+ReLU → Linear → one score."""
    layers = [nn.Linear(data_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
              nn.Linear(hidden, 1)]
    return SequentialNet(layers, (data_dim,), ())


def init_dcgan_(net: nn.Module) -> nn.Module:
    """DCGAN initialisation in place: weights ~ N(0, 0.02), norm scales ~ N(1, 0.02), biases 0."""
    for m in net.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm2d, nn.InstanceNorm2d)) and m.weight is not None:
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.zeros_(m.bias)
    return net


def image_size_of(arch: str) -> int | None:
    """Side length of the images ``arch`` generates (None for the MLP)."""
    return {"dcgan32": 32, "dcgan64": 64}.get(arch)


def build_nets(arch: str, channels: int = 3, width: float = 1.0, nz: int | None = None, *,
               image_size: int | None = None, hidden: int = MLP_HIDDEN, data_dim: int = 2,
               init: str | None = None, bias_before_norm: bool = False,
               instance_norm_affine: bool = True) -> tuple[SequentialNet, SequentialNet]:
    """Build one (generator, critic) pair.

    arch: ``"dcgan32"`` (Tables 2–3), ``"dcgan64"`` (Tables 4–5) or ``"mlp"`` (2-D data).
    channels: image channels C (ignored by the MLP). width: multiplies every hidden
    channel count (and the MLP's ``hidden``), at least 1 channel. nz: latent size
    (100 for the DCGANs, 8 for the MLP when None). image_size: if given, checked
    against what ``arch`` makes. init: ``"dcgan"`` (default for the image nets) or
    ``"default"`` (PyTorch's; default for the MLP). Uses the global torch RNG.
    """
    if arch not in ARCHS:
        raise ConfigError("arch", arch, f"must be one of {', '.join(ARCHS)}")
    makes = image_size_of(arch)
    if image_size is not None and makes is not None and int(image_size) != makes:
        other = [a for a in ARCHS if image_size_of(a) == int(image_size)]
        hint = f"; use {{arch={other[0]}}}" if other else ""
        raise ConfigError("image_size", image_size, f"{{arch}} makes {makes}x{makes} images{hint}", {"arch": arch})
    if not (isinstance(width, (int, float)) and width > 0):
        raise ConfigError("width", width, "must be a number > 0")
    nz = DEFAULT_NZ[arch] if nz is None else nz
    if int(nz) != nz or nz < 1:
        raise ConfigError("nz", nz, "must be an integer >= 1")
    if makes is not None and (int(channels) != channels or channels < 1):
        raise ConfigError("channels", channels, "must be an integer >= 1")
    if arch == "mlp":
        check_int("hidden", hidden, 1)
        check_int("data_dim", data_dim, 1)
    init = ("default" if arch == "mlp" else "dcgan") if init is None else init
    if init not in INITS:
        raise ConfigError("init", init, f"must be one of {', '.join(INITS)}")

    if arch == "mlp":
        h = scaled_channels(hidden, width)
        G, D = mlp_generator(int(nz), h, data_dim), mlp_critic(h, data_dim)
    else:
        full = DCGAN32_CHANNELS if arch == "dcgan32" else DCGAN64_CHANNELS
        g_hidden = [scaled_channels(c, width) for c in full]
        G = dcgan_generator(g_hidden, int(channels), int(nz), bias_before_norm)
        D = dcgan_critic(g_hidden[::-1], int(channels), bias_before_norm, instance_norm_affine)
    if init == "dcgan":
        init_dcgan_(G)
        init_dcgan_(D)
    return G, D
