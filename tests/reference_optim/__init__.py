"""The per-parameter optimizers as they were before the flat-buffer rewrite (commit 1e7f3a7),
kept verbatim as the oracle that ``tests/test_optim_flat.py`` compares the flat (numba, eager, compiled) and
jointly stepped paths against in float64."""
from .adam3 import Dadam3
from .oadagrad import OAdagrad
from .oadam import DPOAdam
from .osg import DOSG
from .simultaneous import DAdam, DSGD

REFERENCE = {"dadam3": Dadam3, "dosg": DOSG, "oadagrad": OAdagrad, "dp_oadam": DPOAdam, "dadam": DAdam,
             "dsgd": DSGD}
