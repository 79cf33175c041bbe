"""What compiled code needs across the packages: numba's on-disk cache, made safe to fail
(:mod:`~dadam3.compiled.numba_cache`)."""
