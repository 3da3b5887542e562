"""The worked plugin example of docs/writing-plugins.md runs: the files in examples/my_plugins
train a tiny model through the real nmt-train (--user-dir is the only hook), the checkpoint records
them, nmt-generate translates with them; and the Markdown shows exactly those files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from train_toy_data import TINY_MODEL, make_toy_task

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "my_plugins"
GUIDE = ROOT / "docs" / "writing-plugins.md"


def included_blocks(markdown: str) -> dict[str, str]:
    """``<!-- file: PATH -->`` followed by a fenced code block -> {PATH: the block's text}."""
    pattern = re.compile(r"<!-- file: (\S+) -->\n```[a-z]*\n(.*?)```", re.S)
    return {path: body for path, body in pattern.findall(markdown)}


def test_the_guide_shows_every_example_file_verbatim():
    blocks = included_blocks(GUIDE.read_text(encoding="utf-8"))
    files = sorted(p.relative_to(ROOT).as_posix() for p in EXAMPLES.glob("*.py"))
    assert sorted(blocks) == files
    for path, body in blocks.items():
        assert body == (ROOT / path).read_text(encoding="utf-8"), f"docs/writing-plugins.md: {path} differs"


def test_lion_moves_every_parameter_by_lr():
    from nmt.plugin_loader import import_user_dir, load_plugins
    from nmt.training.optimizer import build_optimizer

    load_plugins()
    import_user_dir(EXAMPLES)
    weight = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    optimizer = build_optimizer({"name": "lion", "lion_betas": "(0.9, 0.99)", "weight_decay": 0.0}, [weight], 0.1)
    weight.grad = torch.tensor([0.5, -0.1, 0.0])
    optimizer.step()
    assert torch.allclose(weight.detach(), torch.tensor([0.9, -1.9, 3.0]))


def run(module: str, argv: list[str]) -> subprocess.CompletedProcess:
    code = f"from nmt.cli.{module} import main; main()"
    return subprocess.run([sys.executable, "-c", code, *map(str, argv)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.slow
def test_example_plugins_train_and_translate_through_the_cli(tmp_path):
    from nmt.checkpoint.format import load_checkpoint

    data = make_toy_task(tmp_path / "copy", n_train=120, n_valid=8)
    save = tmp_path / "ck"
    done = run("train", [data, *TINY_MODEL, "--user-dir", EXAMPLES, "--attention", "multiplicative",
                         "--multiplicative-init", "random",
                         "--positional", "scaled_sinusoidal", "--optimizer", "lion", "--lion-betas", "(0.9,0.99)",
                         "--lr", "3e-4", "--warmup-updates", "2", "--max-update", "6", "--max-tokens", "256",
                         "--num-threads", "1", "--save-dir", save])
    assert done.returncode == 0, done.stderr[-2000:]
    state = load_checkpoint(save / "checkpoint_last.pt", check_plugins_registered=False)
    used = {(r["kind"], r["name"]) for r in state["plugins"]}
    assert {("attention", "multiplicative"), ("positional", "scaled_sinusoidal"), ("optimizer", "lion")} <= used
    assert state["user_dir"] == str(EXAMPLES.resolve())
    assert state["model_config"]["attention"] == {"name": "multiplicative", "multiplicative_init": "random"}
    assert state["config"]["optimizer"]["lion_betas"] == "(0.9,0.99)"
    scales = [v for k, v in state["model"].items() if k.endswith("positional.scale")]
    assert scales and all(float(s) != 1.0 for s in scales)  # the plugin's own parameter was trained

    done = run("generate", [data, "--path", save / "checkpoint_last.pt", "--user-dir", EXAMPLES,
                            "--gen-subset", "valid", "--beam", "2", "--quiet", "--threads", "1"])
    assert done.returncode == 0, done.stderr[-2000:]

    wrong = run("train", [data, *TINY_MODEL, "--user-dir", EXAMPLES, "--attention", "multiplicative",
                          "--multiplicative-init", "zeros", "--save-dir", tmp_path / "no"])
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert wrong.stderr.strip().splitlines() == [
        "nmt-train: error: --multiplicative-init 'zeros': choose one of identity, random "
        "(model.attention.multiplicative_init)"]

    forgot = run("generate", [data, "--path", save / "checkpoint_last.pt", "--gen-subset", "valid", "--quiet"])
    assert forgot.returncode == 2
    assert f"pass --user-dir {EXAMPLES.resolve()}" in forgot.stderr and "Traceback" not in forgot.stderr


def test_the_contract_table_is_the_same_in_both_guides():
    def table(path: Path) -> str:
        return re.search(r"(\| kind \| decorator.*?\n)\n", path.read_text(encoding="utf-8"), re.S).group(1)

    assert table(GUIDE) == table(ROOT / "docs" / "architecture.md")
    from nmt.registry import REGISTRIES

    rows = table(GUIDE).splitlines()[2:]
    assert len(rows) == len(REGISTRIES)  # a row per kind
    for registry, row in zip(REGISTRIES.values(), rows):
        module, _, name = registry.base.partition(":")
        assert f"`{module}.{name}`" in row, row
