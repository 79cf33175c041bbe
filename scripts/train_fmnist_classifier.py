"""Train a Fashion-MNIST evaluation classifier (dadam3.metrics.fmnist_classifier) on CPU.

    python scripts/train_fmnist_classifier.py [--net cnn|mlp] [--root /usr/share/datasets/fashion-mnist]
                                              [--epochs 6] [--threads 1] [--seed 0] [--out PATH]

``--net cnn`` (default) is the scorer of every Fashion-MNIST FID/IS in the report; ``--net mlp``
the second scorer of another architecture (``metrics.second_extractor=fmnist_mlp``).

Full training set (60 000 images, 32×32 as ``dataset=fashion_mnist`` gives them), random
horizontal flips, AdamW with a one-cycle learning rate, batch 128; seeded and run with
``torch.use_deterministic_algorithms(True)``, so the same torch build and thread count give
the same weights, byte for byte. Prints the test accuracy (10 000 images), the wall time,
and the size and SHA-256 of the saved float32 state dict (default: the net's packaged file,
``dadam3/metrics/weights/fmnist_classifier.pt`` or ``fmnist_mlp.pt``); copy the hash and the
accuracy into the net's entry of ``NETS`` in the module when the weights change.
"""
from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from dadam3.data import build_dataset
from dadam3.data.containers import normalise_uint8
from dadam3.metrics.fmnist_classifier import NET_FLAGS, NETS, state_dict_bytes
from dadam3.errors.files import write_whole


@torch.no_grad()
def accuracy(net: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, batch: int = 1000) -> float:
    """Share of correct predictions; ``images`` uint8 ``N×1×32×32``."""
    net.eval()
    correct = sum(int((net(normalise_uint8(images[i:i + batch])).argmax(1) == labels[i:i + batch]).sum())
                  for i in range(0, len(images), batch))
    return correct / len(images)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--net", choices=tuple(NET_FLAGS), default="cnn")
    p.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=4e-3, help="peak of the one-cycle schedule")
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None, help="default: the net's packaged weights file")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(a.seed)                    # initial weights and dropout
    gen = torch.Generator().manual_seed(a.seed)  # epoch order and flips
    start = time.perf_counter()
    train = build_dataset("fashion_mnist", a.root, train=True)
    test = build_dataset("fashion_mnist", a.root, train=False)
    spec = NETS[NET_FLAGS[a.net]]
    net = spec.cls()
    steps_per_epoch = len(train) // a.batch_size             # the last partial batch is dropped
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=a.lr, total_steps=a.epochs * steps_per_epoch,
                                                pct_start=0.25)
    for epoch in range(a.epochs):
        net.train()
        order = torch.randperm(len(train), generator=gen)
        total = 0.0
        for s in range(steps_per_epoch):
            idx = order[s * a.batch_size:(s + 1) * a.batch_size]
            x = train.get_batch(idx)
            flip = torch.rand(len(idx), generator=gen) < 0.5
            x = torch.where(flip[:, None, None, None], x.flip(-1), x)
            loss = F.cross_entropy(net(x), train.labels[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach())
        acc = accuracy(net, test.images, test.labels)
        print(f"epoch {epoch + 1}/{a.epochs}: train loss {total / steps_per_epoch:.4f}, "
              f"test accuracy {acc:.4f} ({time.perf_counter() - start:.0f} s)", flush=True)

    blob = state_dict_bytes(net)
    out = Path(a.out) if a.out else spec.path
    out.parent.mkdir(parents=True, exist_ok=True)
    write_whole(out, lambda f: f.write(blob))
    print(f"net {a.net} ({NET_FLAGS[a.net]}): test accuracy {acc:.4f} on {len(test)} images")
    print(f"wall time {time.perf_counter() - start:.1f} s with {a.threads} thread(s)")
    print(f"weights {out}: {len(blob)} bytes, sha256 {hashlib.sha256(blob).hexdigest()}")


if __name__ == "__main__":
    main()
