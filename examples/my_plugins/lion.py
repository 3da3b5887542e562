"""The Lion optimizer (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms"): the update
is the sign of an interpolated momentum, so every parameter moves by exactly lr per step. Use an lr
3-10x smaller than Adam's.

Use it with: nmt-train DATA --user-dir examples/my_plugins --optimizer lion --lion-betas '(0.9,0.99)'
"""

from dataclasses import dataclass

import torch

from nmt.fields import opt
from nmt.registry import register_optimizer
from nmt.training.optimizer import parse_betas


@dataclass
class LionConfig:
    lion_betas: str = opt("(0.9, 0.99)", "Lion's beta1 (update interpolation) and beta2 (momentum decay).")
    weight_decay: float = opt(0.0, "Weight decay (adam, sgd: an L2 term added to the gradient; "
                                    "adamw, lion: decoupled from it).", low=0)


@register_optimizer("lion", config=LionConfig)
class Lion(torch.optim.Optimizer):
    """Lion: sign of interpolated momentum, decoupled weight decay."""

    def __init__(self, cfg: LionConfig, params, lr):
        betas = parse_betas(cfg.lion_betas, "--lion-betas")
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": cfg.weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                momentum = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])  # decoupled weight decay
                update = (momentum * beta1 + p.grad * (1 - beta1)).sign_()
                p.add_(update, alpha=-group["lr"])
                momentum.mul_(beta2).add_(p.grad, alpha=1 - beta2)
        return loss

