#!/usr/bin/env bash
# Paper Fig. 4 and the supplement's samples: inception score on Imagenette (64x64) and
# CIFAR-100 (32x32) with M = 15 nodes on the ring: Dadam3, Cadam3, DOSG, COSG.
# Needs the data (dataset.root or $DADAM3_DATA), a GPU and torch-fidelity's Inception weights.
exec bash "$(dirname "$0")/is_figure.sh" fig4 "imagenette cifar100" "dadam3 cadam3 dosg cosg" "$@"
