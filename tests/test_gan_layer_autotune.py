"""dadam3.gan.layer_autotune: the per-layer layout chosen by measurement, checked with an injected
(deterministic) timer: the fastest candidate wins, ties keep the earlier one, the choice is set on
the net, logged, and cached per shape and dtype; the tuned nets equal the default ones in float64."""
from __future__ import annotations

import logging

import torch

from dadam3.gan.layer_autotune import CANDIDATES, autotune_layers, autotune_pair
from dadam3.gan.stacked import _StackedConv, build_stacked_nets

M, B = 2, 2


def _nets(dtype=torch.float64):
    torch.manual_seed(0)
    G, D = build_stacked_nets("dcgan32", M, width=1 / 32, identical_init=False)
    return G.to(dtype), D.to(dtype)


def _inputs(dtype=torch.float64):
    gen = torch.Generator().manual_seed(1)
    return torch.randn(M, B, 100, generator=gen).to(dtype), torch.randn(M, B, 3, 32, 32, generator=gen).to(dtype)


class ScriptedTimer:
    """Returns ``times[call]`` for the calls in order (layer by layer, candidate by candidate), after
    running the candidate once (so every candidate is exercised)."""

    def __init__(self, times):
        self.times, self.calls = list(times), 0

    def __call__(self, run, reps):
        run()
        self.calls += 1
        return self.times[self.calls - 1]


def _tunable(net):
    return [j for j, layer in enumerate(net.layers) if isinstance(layer, _StackedConv) and layer.groups == 1]


def test_fastest_candidate_wins_ties_keep_the_earlier_one_and_the_choice_is_cached_and_logged(caplog):
    G, D = _nets()
    _, images = _inputs()
    layers = _tunable(D)
    assert len(layers) == 4
    # per layer, the candidates' times in CANDIDATES order (grouped_nchw, grouped_nhwc, unfold_bmm)
    script = [[3.0, 2.0, 5.0], [1.0, 1.0, 0.5], [2.0, 2.0, 2.0], [4.0, 3.0, 3.0]]
    expected = {j: CANDIDATES[min(range(3), key=lambda c, s=s: (s[c], c))] for j, s in zip(layers, script)}
    assert list(expected.values()) == ["grouped_nhwc", "unfold_bmm", "grouped_nchw", "grouped_nhwc"]
    cache: dict = {}
    timer = ScriptedTimer([t for s in script for t in s])
    with caplog.at_level(logging.INFO, logger="dadam3.gan.layer_autotune"):
        table = autotune_layers(D, images, "D", timer=timer, cache=cache)
    assert table == expected and timer.calls == 12
    assert {j: D.layers[j].variant for j in layers} == expected
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4 and all(line.startswith("cuda.autotune_layers: D layer") for line in lines)
    assert "grouped_nhwc 2000.000 ms" in lines[0]
    _, D2 = _nets()                                   # the same shapes: from the cache, no timing
    again = ScriptedTimer([])
    assert autotune_layers(D2, images, "D", timer=again, cache=cache) == expected and again.calls == 0
    _, D32 = _nets(torch.float32)                     # another dtype: timed again
    other = ScriptedTimer([1.0] * 12)
    assert autotune_layers(D32, _inputs(torch.float32)[1], "D", timer=other, cache=cache) == \
        dict.fromkeys(layers, "grouped_nchw")
    assert other.calls == 12


def test_autotuned_nets_equal_the_default_ones_in_float64():
    """The trainer's call (real CPU timer, inputs of the run's shapes): whatever wins, G and D
    compute what the grouped-NCHW nets compute (to float64 rounding)."""
    G, D = _nets()
    G0, D0 = _nets()
    z, images = _inputs()
    autotune_pair(G, D, B)
    for net in (G, D):
        assert {net.layers[j].variant for j in _tunable(net)} <= set(CANDIDATES)
    torch.testing.assert_close(G(z), G0(z), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(D(images), D0(images), rtol=1e-12, atol=1e-12)
