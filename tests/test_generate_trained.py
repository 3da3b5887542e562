"""End to end on a model that really learned something: nmt-train learns to copy token strings,
then nmt-generate scores it (BLEU near 100), nmt-interactive copies piped lines, and the average
of its last two checkpoints still copies."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys

import pytest

from nmt.cli.average_checkpoints import main as average_main
from nmt.cli.generate import main as generate_main
from nmt.cli.preprocess import main as preprocess_main
from nmt.cli.train import main as train_main
from test_generate_setup import call_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trained")
    rng = random.Random(0)
    for split, n in (("train", 1000), ("valid", 64)):
        lines = [" ".join(f"t{rng.randrange(16)}" for _ in range(rng.randint(3, 8))) for _ in range(n)]
        for lang in ("src", "tgt"):
            (folder / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    data = folder / "bin"
    assert call_cli(preprocess_main, ["--source-lang", "src", "--target-lang", "tgt", "--trainpref", folder / "train",
                                      "--validpref", folder / "valid", "--destdir", data, "--joined-dictionary"]) == 0
    save = folder / "ck"
    assert call_cli(train_main, [
        data, "--arch", "transformer_tiny", "--encoder-layers", "1", "--decoder-layers", "1", "--share-all-embeddings",
        "--no-progress-bar", "--num-threads", "1", "--save-dir", save, "--max-tokens", "512", "--lr", "5e-3",
        "--warmup-updates", "20", "--adam-betas", "(0.9,0.98)", "--label-smoothing", "0", "--dropout", "0",
        "--max-update", "300", "--log-interval", "100"]) == 0
    return data, save


@pytest.mark.parametrize("precision", [[], ["--bf16"]], ids=["fp32", "bf16"])
@pytest.mark.parametrize("beam", ["4", "1"])
def test_generate_scores_the_copy_model_near_100_bleu(trained, capsys, beam, precision):
    data, save = trained
    assert call_cli(generate_main, [data, "--path", save / "checkpoint_best.pt", "--gen-subset", "valid",
                                    "--beam", beam, "--threads", "1", "--quiet", *precision]) == 0
    out = capsys.readouterr().out
    bleu = float(re.search(r"BLEU = ([\d.]+)", out).group(1))
    assert bleu > 90, out


def test_interactive_copies_piped_lines(trained):
    data, save = trained
    rng = random.Random(7)
    lines = [" ".join(f"t{rng.randrange(16)}" for _ in range(rng.randint(3, 8))) for _ in range(10)]
    script = shutil.which("nmt-interactive")
    command = [script] if script else [sys.executable, "-c", "from nmt.cli.interactive import main; main()"]
    done = subprocess.run([*command, str(data), "--path", str(save / "checkpoint_best.pt"), "--threads", "1"],
                          input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert len(out) == len(lines)
    assert sum(a == b for a, b in zip(out, lines)) >= 8, list(zip(lines, out))


def test_average_of_the_last_checkpoints_still_copies(trained, capsys, tmp_path):
    data, save = trained
    epochs = sorted(save.glob("checkpoint[0-9]*.pt"))
    if len(epochs) < 2:
        pytest.skip("the run wrote fewer than two epoch checkpoints")
    avg = tmp_path / "avg.pt"
    assert call_cli(average_main, ["--inputs", save, "--num-epoch-checkpoints", "2", "--output", avg]) == 0
    assert call_cli(generate_main, [data, "--path", avg, "--gen-subset", "valid", "--beam", "4", "--threads", "1",
                                    "--quiet"]) == 0
    out = capsys.readouterr().out
    assert float(re.search(r"BLEU = ([\d.]+)", out).group(1)) > 80, out
