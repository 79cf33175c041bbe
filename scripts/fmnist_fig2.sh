#!/usr/bin/env bash
# Paper Fig. 2 in miniature: one node, Adam3 vs OAdagrad on Fashion-MNIST (experiment=fmnist_fig2),
# seeds 0-4 (SEEDS to choose). Extra arguments go to every run. Writes results/fmnist/fig2/.
exec bash "$(dirname "$0")/fmnist_figure.sh" fig2 fmnist_fig2 "adam3 oadagrad" "${SEEDS:-0 1 2 3 4}" "$@"
