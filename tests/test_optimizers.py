"""Optimizers built by name with their own options, from a resolved config and from a --user-dir."""

import textwrap
from dataclasses import dataclass
from typing import Any, Dict

import pytest
import torch

from nmt.config.loader import resolve_config
from nmt.errors import ConfigError
from nmt.fields import plugin_group
from nmt.plugin_loader import import_user_dir, load_plugins
from nmt.training.optimizer import build_optimizer, parse_floats

load_plugins()


@dataclass
class Job:
    optimizer: Dict[str, Any] = plugin_group("optimizer", "adam", "The optimizer.")


def params():
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(2))]


def test_adam_betas_parsed_from_the_flag_string():
    cfg = resolve_config(Job, flags={"optimizer.adam_betas": "(0.9,0.98)", "optimizer.adam_eps": 1e-9,
                                     "optimizer.weight_decay": 0.01})
    opt = build_optimizer(cfg.optimizer, params(), 5e-4)
    assert isinstance(opt, torch.optim.Adam) and not isinstance(opt, torch.optim.AdamW)
    group = opt.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9 and group["weight_decay"] == 0.01
    assert group["lr"] == 5e-4 and (group["fused"] or group["foreach"])


@pytest.mark.parametrize("text", ["(0.9,0.98)", "0.9, 0.98", "[0.9, 0.98]", (0.9, 0.98)])
def test_parse_floats_forms(text):
    assert parse_floats(text, "--adam-betas", 2) == (0.9, 0.98)


@pytest.mark.parametrize("bad", ["(0.9)", "0.9;0.98", "(a,b)", "(0.9,0.98,0.1)"])
def test_bad_betas_are_a_config_error(bad):
    with pytest.raises(ConfigError, match="--adam-betas"):
        build_optimizer({"name": "adam", "adam_betas": bad}, params(), 1e-3)


def test_adamw_and_sgd_by_name():
    adamw = build_optimizer({"name": "adamw", "weight_decay": 0.1}, params(), 1e-3)
    assert isinstance(adamw, torch.optim.AdamW) and adamw.param_groups[0]["weight_decay"] == 0.1
    cfg = resolve_config(Job, overrides=["optimizer.name=sgd", "optimizer.momentum=0.9", "optimizer.nesterov=true"])
    sgd = build_optimizer(cfg.optimizer, params(), 0.1)
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.param_groups[0]["momentum"] == 0.9 and sgd.param_groups[0]["nesterov"] is True


def test_nesterov_needs_momentum():
    with pytest.raises(ConfigError, match="--momentum"):
        build_optimizer({"name": "sgd", "nesterov": True}, params(), 0.1)


def test_options_of_another_optimizer_are_refused():
    with pytest.raises(ConfigError, match="momentum"):
        resolve_config(Job, flags={"optimizer.name": "adam", "optimizer.momentum": 0.9})


def test_adam_step_descends():
    w = torch.nn.Parameter(torch.tensor([3.0, -2.0]))
    opt = build_optimizer({"name": "adam", "adam_betas": "(0.9,0.98)"}, [w], 0.1)
    for _ in range(20):
        opt.zero_grad()
        (w ** 2).sum().backward()
        opt.step()
    assert (w ** 2).sum().item() < 13.0 / 4


def test_user_dir_optimizer_built_by_name(tmp_path):
    (tmp_path / "my_optim.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass
        import torch
        from nmt.fields import opt
        from nmt.registry import register_optimizer

        @dataclass
        class HalfSGDConfig:
            half_sgd_scale: float = opt(0.5, "Multiply the learning rate by this.")

        @register_optimizer("test_half_sgd", config=HalfSGDConfig)
        class HalfSGD(torch.optim.SGD):
            def __init__(self, cfg, params, lr):
                super().__init__(params, lr=lr * cfg.half_sgd_scale)
    '''))
    import_user_dir(tmp_path)
    cfg = resolve_config(Job, flags={"optimizer.name": "test_half_sgd", "optimizer.half_sgd_scale": 0.25})
    opt = build_optimizer(cfg.optimizer, params(), 0.4)
    assert isinstance(opt, torch.optim.SGD) and opt.param_groups[0]["lr"] == pytest.approx(0.1)


def test_unknown_optimizer_suggests_a_name():
    with pytest.raises(ConfigError, match='Did you mean "adam"'):
        build_optimizer({"name": "adma"}, params(), 1e-3)


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd"])
def test_fast_kernel_matches_the_reference_loop(name):
    group = {"name": name, "weight_decay": 0.01, **({"momentum": 0.9} if name == "sgd" else {})}
    fast_params, ref_params = params(), params()
    fast = build_optimizer(group, fast_params, 1e-2)
    cls = next(c for c in type(fast).__mro__ if c.__module__.startswith("torch.optim"))  # torch's own class
    kept = {k: v for k, v in fast.param_groups[0].items()
            if k in ("lr", "betas", "eps", "weight_decay", "momentum", "nesterov")}
    ref = cls(ref_params, foreach=False, **kept)
    for step in range(3):
        for opt, ps in ((fast, fast_params), (ref, ref_params)):
            for p in ps:
                p.grad = torch.full_like(p, 0.1 * (step + 1)) + p.detach()
            opt.step()
    for a, b in zip(fast_params, ref_params):
        assert torch.allclose(a, b, atol=1e-6)
