"""Write the test fixture tests/data/fashion_mnist/: the first 1000 Fashion-MNIST test images.

Reads the original ``t10k-{images-idx3,labels-idx1}-ubyte.gz`` (default: the Debian package
``dataset-fashion-mnist``, ``/usr/share/datasets/fashion-mnist``) and writes the first ``n``
images and labels under the same file names, as proper IDX files (header count ``n``),
gzip-compressed with time stamp 0, so the output is byte-for-byte reproducible::

    python scripts/make_fashion_mnist_subset.py [--source DIR] [--out DIR] [--count 1000]

The licence text (MIT, Zalando SE 2017) is written beside the files as ``LICENSE``.
"""
from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from dadam3.data.idx import read_idx, write_idx
from dadam3.errors.files import write_text_whole

LICENSE = """\
Fashion-MNIST subset: the first {n} images and labels of the Fashion-MNIST test set
(t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz), unchanged except for the IDX
header count. Written by scripts/make_fashion_mnist_subset.py from {source}.

Source: https://github.com/zalandoresearch/fashion-mnist
Paper:  Han Xiao, Kashif Rasul, Roland Vollgraf. Fashion-MNIST: a Novel Image Dataset for
        Benchmarking Machine Learning Algorithms. arXiv:1708.07747, 2017.

The MIT License (MIT)

Copyright (c) 2017 Zalando SE, https://tech.zalando.com

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests" / "data" / "fashion_mnist"))
    p.add_argument("--count", type=int, default=1000)
    a = p.parse_args()
    source, out = Path(a.source), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, ndim in (("t10k-images-idx3-ubyte.gz", 3), ("t10k-labels-idx1-ubyte.gz", 1)):
        values = read_idx(source / name, ndim=ndim)
        write_idx(out / name, values[:a.count])
        digest = hashlib.sha256((out / name).read_bytes()).hexdigest()
        print(f"{out / name}: {tuple(values[:a.count].shape)} sha256 {digest}")
    write_text_whole(out / "LICENSE", LICENSE.format(n=a.count, source=source))


if __name__ == "__main__":
    main()
