"""scripts/quickstart.sh, the README's main job, run end to end on a tiny slice of Multi30k and a
tiny model: every step announces itself, the recipe comes from examples/multi30k_cpu.yaml (the flags after
`--` above it), a BLEU line is printed, and a rerun reuses every step."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.shared_paths import MULTI30K

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "quickstart.sh"
SPLITS = {"train": 200, "val": 40, "test_2016_flickr": 40}
# A tiny model, few updates, checkpoints at shares of the budget far enough apart to be different.
TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--max-tokens", "512",
        "--max-update", "24", "--save-at-progress", "0.5,0.75,1", "--warmup-updates", "10", "--num-threads", "1",
        "--no-progress-bar"]


def slice_of_multi30k(folder: Path) -> Path:
    """The first lines of each Multi30k file, as plain text under the corpus's own names."""
    folder.mkdir(parents=True)
    for name, count in SPLITS.items():
        for lang in ("en", "de", "fr"):
            with gzip.open(MULTI30K / f"{name}.{lang}.gz", "rt", encoding="utf-8") as f:
                lines = [next(f) for _ in range(count)]
            (folder / f"{name}.{lang}").write_text("".join(lines), encoding="utf-8")
    return folder


def quickstart(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    env.pop("NMT_MULTI30K_DIR", None)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=240)


@pytest.mark.slow
@pytest.mark.skipif(not MULTI30K.is_dir(), reason="needs the shared Multi30k copy")
def test_quickstart_end_to_end_then_rerun_reuses_everything(tmp_path):
    source = slice_of_multi30k(tmp_path / "m30k")
    work = tmp_path / "work"
    work.mkdir()
    args = ["--from", str(source), "--minutes", "0.5", "--", *TINY]
    first = quickstart(work, *args)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for n in range(1, 7):
        assert f"== {n}/6 " in first.stdout
    save = work / "checkpoints" / "multi30k_en_de"
    members = [save / "model1", save / "model2"]  # the default: two models side by side, one seed each
    for member in members:
        assert (member / "checkpoint_best.pt").is_file() and (member / "train_log.jsonl").is_file()
        assert len(list(member.glob("checkpoint_progress_*.pt"))) == 3  # at 0.5, 0.75 and 1 of the budget
        assert (member / "checkpoint_avg.pt").is_file()  # ... averaged
    seeds = [OmegaConf.load(member / "config.yaml").common.seed for member in members]
    assert seeds == [1, 2]
    cfg = OmegaConf.load(members[0] / "config.yaml")  # the recipe's values where the flags after -- leave them
    assert cfg.model.encoder_normalize_before and cfg.model.decoder_normalize_before and cfg.model.dropout == 0.2
    assert (cfg.optimization.lr, cfg.model.encoder_layers, cfg.task.max_tokens) == (0.002, 1, 512)
    chosen = [Path(p) for p in (save / "quickstart_model.txt").read_text().strip().split(":")]
    assert [c.parent for c in chosen] == [Path("checkpoints/multi30k_en_de/model1"),
                                          Path("checkpoints/multi30k_en_de/model2")]
    assert all(c.name in ("checkpoint_best.pt", "checkpoint_avg.pt") for c in chosen)
    assert "valid on 'valid' subset" in first.stdout  # both candidates scored by nmt-validate
    assert "model 2 trains beside model 1" in first.stdout
    results = save / "test" / "generate-test.txt"
    assert "Generate test with beam=8: BLEU = " in results.read_text()
    generate = (save / "test" / "quickstart_generate.done").read_text()
    assert " --gen-subset test --beam 8 " in generate and f" --path {':'.join(map(str, chosen))} " in generate
    assert "bleu_lc_tok signature: bleu_lc_tok|lc|punct-norm:de|moses-tok-a:de|" in results.read_text()
    last = first.stdout.splitlines()[-3:]  # detokenized sacreBLEU and chrF2, then the papers' lowercased tokenized BLEU
    assert "BLEU = " in last[0] and "chrF2 = " in last[1] and "BLEU (lc-tok) = " in last[2]

    logs_before = [(member / "train_log.jsonl").read_text() for member in members]
    again = quickstart(work, *args)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "already holds Multi30k" in again.stdout
    assert again.stdout.count("training already finished") == 2
    for reused in ("reusing the choice", "reusing checkpoints/multi30k_en_de/test/generate-test.txt",
                   "reusing checkpoints/multi30k_en_de/plots/training.png"):
        assert reused in again.stdout
    assert [(member / "train_log.jsonl").read_text() for member in members] == logs_before  # no training

    one = quickstart(work, "--from", str(source), "--minutes", "0.5", "--models", "1", "--save-dir", "one",
                     "--", *TINY, "--seed", "3")
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]
    assert (work / "one" / "checkpoint_best.pt").is_file() and not (work / "one" / "model1").exists()
    assert OmegaConf.load(work / "one" / "config.yaml").common.seed == 3
    assert Path((work / "one" / "quickstart_model.txt").read_text().strip()).parent == Path("one")
    assert "BLEU (lc-tok) = " in one.stdout.splitlines()[-1]

    failing = quickstart(work, "--from", str(source), "--save-dir", "bad", "--", *TINY, "--no-such-flag")
    assert failing.returncode == 1 and re.search(r"the training into bad/model[12] failed", failing.stderr)
    assert not list((work / "bad").glob("*/quickstart_train.done")) and "== 4/6" not in failing.stdout


def test_bad_arguments_fail_at_once_with_the_fix(tmp_path):
    missing = quickstart(tmp_path, "--from", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "--from" in missing.stderr and "no such folder" in missing.stderr
    minutes = quickstart(tmp_path, "--minutes", "soon")
    assert minutes.returncode == 2 and "--minutes soon" in minutes.stderr
    models = quickstart(tmp_path, "--models", "0")
    assert models.returncode == 2 and "--models 0" in models.stderr
    seed = quickstart(tmp_path, "--", "--seed", "3")
    assert seed.returncode == 2 and "--seed" in seed.stderr and "--models 1" in seed.stderr
    unknown = quickstart(tmp_path, "--fast")
    assert unknown.returncode == 2 and "unknown argument --fast" in unknown.stderr
    assert not (tmp_path / "raw").exists()  # nothing started
