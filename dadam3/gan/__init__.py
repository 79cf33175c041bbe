"""GANs of Section 5.2–5.3: the paper's nets, M-node stacked execution, WGAN-GP."""
from dadam3.gan.nets import ARCHS, SequentialNet, build_nets, init_dcgan_
from dadam3.gan.own_nets import COUPLING_NORMS, check_nets, stack_own_nets
from dadam3.gan.stacked import StackedNet, build_stacked_nets
from dadam3.gan.vmapped import VmapNet, stack_nets
from dadam3.gan.wgan_gp import (GP_LAMBDA, critic_step, generator_step, gradient_penalty,
                                interpolate, wgan_gp_objectives, wgan_gp_step)

__all__ = [
    "ARCHS", "SequentialNet", "build_nets", "init_dcgan_",
    "StackedNet", "build_stacked_nets", "VmapNet", "stack_nets", "COUPLING_NORMS", "check_nets", "stack_own_nets",
    "GP_LAMBDA", "critic_step", "generator_step", "gradient_penalty", "interpolate",
    "wgan_gp_objectives", "wgan_gp_step",
]
