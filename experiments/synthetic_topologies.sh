#!/usr/bin/env bash
# Beyond the paper: Dadam3 on the synthetic game over several 16-node topologies and
# gossip rounds (Hydra multirun; one metrics.csv per run under multirun/).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m dadam3.synthetic -m optimizer=dadam3 nodes=16 iterations=1000000 \
  topology=ring,torus,exponential,one_peer_exponential,complete topology.rounds=1,3 "$@"
