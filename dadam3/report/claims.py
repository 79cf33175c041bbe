"""What the paper claims per figure (its own words, shortened), the claims each section tests,
and the commands of the figures without committed runs."""
from __future__ import annotations

FIG1 = ("Section 5.1, Fig. 1: on the synthetic strongly-convex-strongly-concave game (M = 5 ring, c = 1010, "
        "k = 0.01, N = 10⁷, η = 10⁻², β₁ = 0, β₂ = 1/(1+c²), β₃ = 0.1) \"Dadam3 finds the unique FNE point while "
        "DP-OAdam diverges from the desired point\".")
FIG1_RULE = ("The claim counts as reproduced when Dadam3's final error e_k is below 0.1 and below a tenth of "
             "DP-OAdam's.")
FIG2 = ("Section 5.3, Fig. 2: inception score on CelebA (64×64) and CIFAR-10 (32×32), one node, Table 6 settings "
        "(lr 5·10⁻⁵, batch 64, 30 000 iterations): \"Algorithm 1 [Adam3] outperforms OAdagrad\".")
FIG3 = ("Section 5.3, Fig. 3: inception score on MNIST and CIFAR-10 with M = 5 nodes: \"Dadam3 and Cadam3 are able "
        "to generate high quality images and reach a higher inception score more quickly compared to DSGD and "
        "CSGD\"; the centralised variants match the decentralised one \"but with higher communication cost\".")
FIG4 = ("Section 5.3, Fig. 4: inception score on Imagenette (64×64) and CIFAR-100 (32×32) with M = 15 nodes, "
        "the same four methods and the same claim as Fig. 3.")
TOY = ("Not in the paper: a CPU-scale check of the same claim (adaptive momentum beats optimistic SGD, and a "
       "naive decentralised Adam is not enough) on WGAN-GP for the 8-Gaussians ring with MLPs, M = 5 ring.")
BF16 = ("Not in the paper: whether bf16 autocast (loop.autocast=bf16) trains like float32 on the Fig. 3 "
        "miniature (Dadam3, M = 5).")

# (a, relation, b): "≫" a is better than b (lower FID), "≈" equal within the margin (stats.verdict)
CLAIMS_FIG2 = [("adam3", "≫", "oadagrad")]
CLAIMS_FIG3 = [("dadam3", "≫", "dosg"), ("dadam3", "≫", "cosg"), ("cadam3", "≫", "dosg"), ("cadam3", "≫", "cosg"),
               ("dadam3", "≈", "cadam3"), ("dosg", "≈", "cosg")]

# figure -> (claim, [(dataset, command)])
IMAGE_FIGURES = {
    "fig2": (FIG2, [("celeba, cifar10", "bash scripts/fig2_single_node.sh")]),
    "fig3": (FIG3, [("mnist, cifar10", "bash scripts/fig3_five_nodes.sh")]),
    "fig4": (FIG4, [("imagenette, cifar100", "bash scripts/fig4_fifteen_nodes.sh")]),
}
