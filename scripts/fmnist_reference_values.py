"""Reference values of IS / FID / KID with the Fashion-MNIST classifier: the scale of the numbers.

    python scripts/fmnist_reference_values.py [--root /usr/share/datasets/fashion-mnist]
                                              [--out results/fmnist] [--cache-root DIR] [--threads 1]

With the packaged classifier (``feature_extractor="dadam3-fmnist-classifier"``), through
torch-fidelity's ``calculate_metrics`` with its defaults (IS: 10 splits of shuffled samples;
KID: 100 subsets of 1000; rng seed 2020), the reference being the 60 000 training images:

* the real test set (10 000 images): IS, FID and KID against the training set — what a
  perfect generator would get;
* 10 000 images of uniform noise in [-1, 1] (``torch.Generator`` seeded with ``--seed``):
  IS, FID and KID against the training set — what a useless one gets.

Writes ``reference_values.md`` and ``reference_values.json`` into ``--out`` and prints the
table and the wall times (the first FID/KID call also computes and caches the training
set's features under ``--cache-root``, default ``default_cache_dir()/fidelity``).
"""
from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import torch
import torch_fidelity

from dadam3.data import build_dataset
from dadam3.metrics import fmnist_classifier as fc
from dadam3.metrics.fidelity import dataset_cache_name, image_fidelity_metrics
from dadam3.metrics.images import to_uint8_rgb
from dadam3.metrics.spec import FMNIST_CLASSIFIER, FidelitySpec
from dadam3.errors.files import write_text_whole

ROWS = (("real test set (10 000)", "test"), ("uniform noise in [-1, 1] (10 000)", "noise"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "fmnist"))
    p.add_argument("--cache-root", default=None, help="torch-fidelity cache (default: a fresh temporary "
                                                       "directory, so the timing includes the training features)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=500)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    tmp = tempfile.TemporaryDirectory() if a.cache_root is None else None
    cache_root = a.cache_root if a.cache_root is not None else tmp.name

    t0 = time.perf_counter()
    train = build_dataset("fashion_mnist", a.root, train=True)
    test = build_dataset("fashion_mnist", a.root, train=False)
    noise = to_uint8_rgb(torch.rand(len(test), 1, 32, 32, generator=torch.Generator().manual_seed(a.seed)) * 2 - 1)
    times = {"load_data_s": time.perf_counter() - t0}
    values = {}
    spec = FidelitySpec(batch_size=a.batch_size, feature_extractor=FMNIST_CLASSIFIER, isc=True, fid=True, kid=True,
                        cache_root=cache_root)
    for label, key in ROWS:
        t = time.perf_counter()
        values[key] = image_fidelity_metrics(test if key == "test" else noise, spec, reference=train)
        times[f"{key}_s"] = time.perf_counter() - t
        print(f"{label}: " + ", ".join(f"{k} {v:.6g}" for k, v in values[key].items())
              + f" ({times[f'{key}_s']:.1f} s)", flush=True)
    times["total_s"] = time.perf_counter() - t0

    setup = {
        "feature_extractor": FMNIST_CLASSIFIER, "weights_sha256": fc.WEIGHTS_SHA256,
        "classifier_test_accuracy": fc.TEST_ACCURACY, "reference": "Fashion-MNIST training set (60 000)",
        "reference_cache_name": dataset_cache_name(train, FMNIST_CLASSIFIER), "noise_seed": a.seed,
        "is_splits": 10, "kid_subsets": 100, "kid_subset_size": 1000, "torch_fidelity_rng_seed": 2020,
        "torch_fidelity": torch_fidelity.__version__, "torch": torch.__version__, "threads": a.threads,
        "cpu": platform.processor() or platform.machine(),
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_whole(out / "reference_values.json", json.dumps({"setup": setup, "values": values, "wall_time": times},
                                                          indent=2) + "\n")
    lines = [
        "# Fashion-MNIST: reference values of IS / FID / KID with the Fashion-MNIST classifier",
        "",
        f"Written by `scripts/fmnist_reference_values.py` (feature extractor `{FMNIST_CLASSIFIER}`, weights "
        f"SHA-256 `{fc.WEIGHTS_SHA256[:16]}…`, test accuracy {fc.TEST_ACCURACY:.2%}; torch-fidelity "
        f"{torch_fidelity.__version__}). IS from the classifier's 10 logits (so 1 ≤ IS ≤ 10), FID and KID "
        "from its 128 penultimate features against the 60 000 training images; torch-fidelity's defaults "
        "(IS: 10 splits, KID: 100 subsets of 1000, rng seed 2020). The noise images are uniform in [-1, 1] "
        f"(torch.Generator seed {a.seed}), quantised to 8 bits like every generated image.",
        "",
        "| images (vs training set) | IS | FID | KID |",
        "| --- | --- | --- | --- |",
    ]
    for label, key in ROWS:
        v = values[key]
        lines.append(f"| {label} | {v['is_mean']:.3f} ± {v['is_std']:.3f} | {v['fid']:.4g} "
                     f"| {v['kid_mean']:.4g} ± {v['kid_std']:.3g} |")
    lines += ["", "IS and KID are given as mean ± std over torch-fidelity's splits / subsets. KID is the unbiased "
              "MMD² estimate, so real images score ≈ 0 (within its subset noise) and may come out slightly "
              "negative. The classifier's features are larger than Inception's (mean x·y/d ≈ 1.1 for the "
              "polynomial kernel), so FID/KID here are on their own scale: compare a generator with these two "
              "rows, not with Inception-based numbers.",
              "", f"Wall time on {a.threads} CPU thread{'s' if a.threads > 1 else ''}: {times['total_s']:.0f} s in all "
              f"(loading the data {times['load_data_s']:.1f} s; test set {times['test_s']:.1f} s, which includes "
              f"computing and caching the training set's features; noise {times['noise_s']:.1f} s, training "
              "features read from the cache).", ""]
    write_text_whole(out / "reference_values.md", "\n".join(lines))
    print("\n".join(lines))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
