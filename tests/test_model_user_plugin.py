"""A user's attention plugin in a --user-dir folder builds and trains a tiny model with no
change to nmt itself, directly and through `nmt-train --user-dir`."""

from pathlib import Path

import torch
import torch.nn.functional as F

from fake_dictionary import FakeDict
from nmt.models import build_model
from nmt.plugin_loader import import_user_dir, load_plugins

# The worked example of docs/writing-plugins.md (Luong's multiplicative attention), used as is.
PLUGIN = (Path(__file__).resolve().parent.parent / "examples" / "my_plugins"
          / "multiplicative_attention.py").read_text(encoding="utf-8")


def test_user_attention_plugin_trains_a_tiny_model(tmp_path):
    (tmp_path / "multiplicative.py").write_text(PLUGIN)
    load_plugins()
    import_user_dir(tmp_path)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = build_model({"arch": "transformer_tiny", "encoder_embed_dim": 32, "decoder_embed_dim": 32,
                         "encoder_ffn_embed_dim": 64, "decoder_ffn_embed_dim": 64, "dropout": 0.0,
                         "attention": "multiplicative", "share_all_embeddings": True}, FakeDict(16), FakeDict(16))
    assert set(model.plugin_names().values()) >= {"multiplicative"}
    src = torch.randint(4, 16, (8, 6))
    target = src.clone()  # copy task
    prev = torch.cat([torch.zeros(8, 1, dtype=torch.long), target[:, :-1]], dim=1)
    bilinear = model.decoder.layers[0].cross_attn.bilinear
    start = bilinear.detach().clone()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        logits = model(src, None, prev)
        loss = F.cross_entropy(logits.reshape(-1, 16), target.reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert not torch.equal(bilinear, start)  # the plugin's own parameter is trained


def test_user_attention_plugin_through_nmt_train(tmp_path):
    """The same plugin through the real CLI, in a fresh process: --user-dir is the only hook."""
    import json
    import subprocess
    import sys

    from nmt.checkpoint.format import load_checkpoint
    from train_toy_data import TINY_MODEL, make_toy_task

    plugins = tmp_path / "my_plugins"
    plugins.mkdir()
    (plugins / "multiplicative.py").write_text(PLUGIN)
    data = make_toy_task(tmp_path / "copy", n_train=120, n_valid=8)
    save = tmp_path / "ck"
    argv = [str(data), *TINY_MODEL, "--user-dir", str(plugins), "--attention", "multiplicative",
            "--max-update", "6", "--max-tokens", "256", "--lr", "3e-3", "--num-threads", "1",
            "--save-dir", str(save), "--log-interval", "1"]
    done = subprocess.run([sys.executable, "-c", "from nmt.cli.train import main; main()", *argv],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    logged = [json.loads(line) for line in (save / "train_log.jsonl").read_text().splitlines()]
    assert [r["num_updates"] for r in logged if r["kind"] == "train_inner"][-1] == 6
    state = load_checkpoint(save / "checkpoint_last.pt", check_plugins_registered=False)
    used = {(r["kind"], r["name"]) for r in state["plugins"]}
    assert ("attention", "multiplicative") in used
