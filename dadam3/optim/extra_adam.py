"""ExtraAdam: extra-gradient Adam (Gidel, Berard, Vignoud, Vincent, Lacoste-Julien, "A Variational
Inequality Perspective on Generative Adversarial Networks", ICLR 2019, Algorithm 4 "Extra-Adam"),
run on each node and followed by gossip averaging of the parameters (decentralized as DP-OAdam,
:mod:`dadam3.optim.adam`). Step k (k = 1, 2, ...; m_0 = v_0 = 0) on the skeleton of
:mod:`dadam3.optim.skeletons.extragradient`:

    g_{k-1/2} = operator at X_{k-1}
    m_{k-1/2} = beta1 m_{k-1}   + (1 - beta1) g_{k-1/2},     m_hat = m_{k-1/2} / (1 - beta1^(2k-1))
    v_{k-1/2} = beta2 v_{k-1}   + (1 - beta2) g_{k-1/2}^2,   v_hat = v_{k-1/2} / (1 - beta2^(2k-1))
    X_{k-1/2} = X_{k-1} - eta m_hat / (sqrt(v_hat) + eps)                    (extrapolation, local)
    g_k       = operator at X_{k-1/2}                                         (second gradient)
    m_k       = beta1 m_{k-1/2} + (1 - beta1) g_k,           m_hat = m_k / (1 - beta1^(2k))
    v_k       = beta2 v_{k-1/2} + (1 - beta2) g_k^2,         v_hat = v_k / (1 - beta2^(2k))
    X_k       = (X_{k-1} - eta m_hat / (sqrt(v_hat) + eps)) W_k^t             (update from X_{k-1}, gossip)

As in the paper and its reference code (``optim/extragradient.py`` of the authors' repository:
``ExtraAdam.update`` runs at the extrapolation and at the step, each time advancing Adam's ``step``
counter and both moments), the moments are updated at both gradients and the bias corrections
count 2k - 1 and 2k. That code puts eps on the uncorrected sqrt(v) (torch 0.4's Adam); here it
is the paper's sqrt(v_hat) + eps, as in DAdam and DP-OAdam. Both gradients of a step are taken on
the same batch (the iteration's gradient callback); the parameters after ``step()`` hold X_k.
"""
from __future__ import annotations

from dadam3.optim.adam import ADAM_HPARAMS, ADAM_SYNTHETIC, AdamScalars, adam_direction, adam_scalars
from dadam3.optim.registry import optimizer
from dadam3.optim.skeletons.extragradient import ExtraGradientGossip


@optimizer("extra_adam")
class ExtraAdam(ExtraGradientGossip):
    """Decentralized extra-gradient Adam (see module docstring); lr, beta1, beta2, eps."""

    HPARAMS = ADAM_HPARAMS
    SYNTHETIC = ADAM_SYNTHETIC

    STATE = {"m": 0.0, "v": 0.0}

    SCALARS = AdamScalars
    scalars = staticmethod(adam_scalars)

    @staticmethod
    def direction(g, a, m, v):
        return adam_direction(g, a, m, v)                    # D at tick 2k - 1 or 2k, by ``a``
