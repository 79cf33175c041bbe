"""The run machinery: everything that turns a config into a run directory, and nothing of the science.

The line: the science (:mod:`dadam3.optim`, :mod:`dadam3.topologies`, :mod:`dadam3.mixing`,
:mod:`dadam3.games`, :mod:`dadam3.gan`, :mod:`dadam3.metrics`, :mod:`dadam3.data`) never imports
this package (``tests/test_layering.py`` imports every science module with ``dadam3.run`` made
unimportable). The training LOOP is run machinery (:mod:`dadam3.run.trainer`): it owns the
checkpoints, the stop signals, the progress bar, the records and the run's early stops. What one
iteration computes stays science in :mod:`dadam3.gan`, taking plain arguments. A run starts in
:mod:`dadam3.run.start`, one sequence: settings, checks, the run directory claimed, state, logs.
The errors both sides raise, and the entry points' one boundary, are in :mod:`dadam3.errors`,
which depends on nothing of the package.
"""
