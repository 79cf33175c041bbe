"""Instruction counts of numba's machine code (``inspect_asm()``) of the synthetic game's compiled loop
and of the CPU engine's passes (float64), per optimizer: a count that does not depend on the
machine's load, to show that a change leaves the compiled code as it was.

    NUMBA_CACHE_DIR=$(mktemp -d) PYTHONPATH=<tree> python scripts/asm_counts.py [OPTIMIZER ...]

Run it once per tree (a fresh cache directory: numba compiles, so the machine code is there to
read). It prints, per optimizer, the loop's (instructions, calls) for each compiled signature
(null: no compiled loop) and the passes' instructions (null: no numba pass): lines of machine code
that are neither labels, directives nor comments.
"""
import json
import re
import sys


def count(asm: str) -> tuple[int, int]:
    n = calls = 0
    for line in asm.splitlines():
        s = line.strip()
        if not s or s.startswith((".", "#", ";")) or s.endswith(":"):
            continue
        n += 1
        calls += bool(re.match(r"call", s))
    return n, calls


def main(names):
    import torch

    from dadam3.optim import OPTIMIZERS
    from dadam3.games.synthetic_kernels import kernel_for
    from dadam3.optim.numba_compile import flat_passes
    out = {}
    for name in names:
        cls = OPTIMIZERS[name].cls
        k = kernel_for(cls)
        loop = None
        if k is not None:
            asm = k.run.inspect_asm()
            loop = [count(a) for a in asm.values()]
        passes = flat_passes(cls, torch.float64)
        p = None
        if passes is not None:
            p = sum(count(a)[0] for f in passes.values() for a in f.inspect_asm().values())
        out[name] = {"loop (instructions, calls)": loop, "passes": p}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:] or ["dadam3", "dp_oadam", "extra_adam"])
