"""The run machinery: everything that turns a config into a run directory, and nothing of the science.

Here: the schema (``schema/``: the config declared once, checked once into typed settings), the
start of a training run (``start.py``: a resume's own config, then the settings) and its build
(``build.py``, every check first: ``checks.py``, ``directory.py``, ``manifest.py``), the trainer
(``trainer.py``, with its ``state.py`` and ``records.py``), checkpoints (``checkpoint/``), the log
(``loggers.py``, ``rewind.py``, ``job_log.py``), stop signals (``signals.py``), sweeps
(``sweep.py``), the divergence rule (``divergence.py``), the process-wide CUDA settings
(``cuda_flags.py``) and the paths a run will write, checked first (``paths.py``).

The line: the science (:mod:`dadam3.optim`, :mod:`dadam3.topology`, :mod:`dadam3.mixing`,
:mod:`dadam3.games`, :mod:`dadam3.gan`, :mod:`dadam3.metrics`, :mod:`dadam3.data`) never imports
this package (``tests/test_layering.py`` imports every science module with ``dadam3.run`` made
unimportable). The training LOOP is run machinery: it owns the checkpoints, the stop signals, the
progress bar, the records and the run's early stops, so it lives here (:mod:`dadam3.run.trainer`),
with the state it saves and loads as one (:mod:`dadam3.run.state`: the checkpoint's RNG and
per-node layout) and the records it logs (:mod:`dadam3.run.records`). What one iteration
computes stays science in :mod:`dadam3.gan`: the WGAN-GP steps, the nets and their node-stacked
execution, the CUDA graphs, finiteness, clipping and sample grids, each taking plain arguments.
The errors both sides raise, and the entry points' one boundary, are in :mod:`dadam3.errors`,
which depends on nothing of the package.
"""
