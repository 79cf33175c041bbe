"""Process-wide CUDA settings for float32 runs: TF32 tensor cores and cuDNN autotuning.

TF32 rounds the operands of float32 convolutions and matmuls to 10 mantissa bits and
runs them on the tensor cores (about 7x the plain float32 rate on Hopper); the
accumulation stays float32. The gossip matmul ignores this setting and always runs
in IEEE float32 (:func:`dadam3.mixing.ieee_fp32_matmul`).
"""
from __future__ import annotations

import torch

from dadam3.errors.config import check_bool


def set_cuda_flags(tf32: bool, cudnn_benchmark: bool) -> str:
    """Set torch's TF32 flags (matmul and cuDNN convolution) and ``cudnn.benchmark`` (both
    booleans); returns a one-line description of what is now set."""
    for name, value in (("tf32", tf32), ("cudnn_benchmark", cudnn_benchmark)):
        check_bool(name, value)
    precision = "tf32" if tf32 else "ieee"
    be = torch.backends
    be.cuda.matmul.fp32_precision = precision
    be.cudnn.conv.fp32_precision = precision
    be.cudnn.benchmark = cudnn_benchmark
    return (f"matmul fp32_precision={be.cuda.matmul.fp32_precision}, cudnn.conv fp32_precision="
            f"{be.cudnn.conv.fp32_precision}, cudnn.benchmark={be.cudnn.benchmark}")
