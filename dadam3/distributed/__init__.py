"""torch.distributed: a rank holds a contiguous block of the M nodes.

* :mod:`~dadam3.distributed.startup` — the rank's environment (torchrun, submitit), the process
  group, the ranks' agreement on config and code, shut-down;
* :mod:`~dadam3.distributed.mixer` — :class:`DistributedMixer`, the neighbour exchange;
* :mod:`~dadam3.distributed.placement` — which nodes a rank holds (:func:`node_blocks`) and
  :class:`Placement`, how per-node values move between ranks;
* :mod:`~dadam3.distributed.failures` — :class:`DistributedTimeout` (a peer hung or died) and
  :func:`exit_on_peer_failure`, the entry points' exit for it.
"""
from dadam3.distributed.failures import exit_on_peer_failure
from dadam3.distributed.mixer import DistributedMixer
from dadam3.distributed.placement import Placement, node_blocks
from dadam3.distributed.startup import agree_on_config, init_from_env, run_fingerprint, shutdown

__all__ = ["DistributedMixer", "Placement", "agree_on_config", "exit_on_peer_failure", "init_from_env", "node_blocks",
           "run_fingerprint", "shutdown"]
