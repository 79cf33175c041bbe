#!/usr/bin/env bash
# Paper Fig. 3 in miniature: M = 5 ring, Dadam3, Cadam3, DOSG, COSG on Fashion-MNIST, 3 seeds
# (experiment=fmnist_fig3). Extra arguments go to every run. Writes results/fmnist/fig3/.
exec bash "$(dirname "$0")/fmnist_figure.sh" fig3 fmnist_fig3 "dadam3 cadam3 dosg cosg" "${SEEDS:-0 1 2}" "$@"
