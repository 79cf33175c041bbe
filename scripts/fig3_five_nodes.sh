#!/usr/bin/env bash
# Paper Fig. 3 and the supplement's MNIST / CIFAR-10 samples: inception score with
# M = 5 nodes on the ring: Dadam3, Cadam3, DOSG, COSG; Table 6 hyper-parameters.
# Needs the data (dataset.root or $DADAM3_DATA), a GPU and torch-fidelity's Inception weights.
exec bash "$(dirname "$0")/is_figure.sh" fig3 "mnist cifar10" "dadam3 cadam3 dosg cosg" "$@"
