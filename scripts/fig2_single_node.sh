#!/usr/bin/env bash
# Paper Fig. 2: inception score on CelebA (64x64) and CIFAR-10 (32x32), one node:
# Adam3 (Algorithm 1) vs OAdagrad; Table 6 hyper-parameters, 30 000 iterations.
# Needs the data (dataset.root or $DADAM3_DATA), a GPU and torch-fidelity's Inception weights.
exec bash "$(dirname "$0")/is_figure.sh" fig2 "celeba cifar10" "adam3 oadagrad" "$@"
