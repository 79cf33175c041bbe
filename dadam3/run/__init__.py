"""The run machinery: everything that turns a config into a run directory, and nothing of the science.

The science (:mod:`dadam3.optim`, :mod:`dadam3.topology`, :mod:`dadam3.mixing`, :mod:`dadam3.games`,
:mod:`dadam3.gan`, :mod:`dadam3.metrics`, :mod:`dadam3.data`) never imports this package
(``tests/test_layering.py`` imports every science module with ``dadam3.run`` unimportable).
"""
