"""nmt-train --eval-bleu through the real CLI: validation records get sacreBLEU's bleu and chrf, the
best checkpoint and --patience follow a maximized bleu, translating at validation does not change
training, a wrong --eval-bleu option is one line; and nmt-generate prints chrF beside BLEU."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from nmt.cli.generate import main as generate_main
from nmt.training.validation_bleu import ValidationBleu
from test_generate_setup import call_cli
from train_toy_data import TINY_MODEL, build_run, call_train, make_toy_task, read_log, run_train

# dropout on: a validation that drew random numbers or left the model in eval mode would show
RUN = [*TINY_MODEL, "--max-tokens", "128", "--num-threads", "1", "--dropout", "0.1", "--max-update", "6",
       "--validate-interval-updates", "3", "--log-interval", "3", "--seed", "5", "--lr", "1e-2",
       "--warmup-updates", "3"]
BLEU = ["--eval-bleu", "--eval-bleu-args", json.dumps({"beam": 2, "max_len_a": 1.2, "max_len_b": 4}),
        "--eval-bleu-print-samples", "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"]


@pytest.fixture(scope="module")
def small_bin(tmp_path_factory):
    return make_toy_task(tmp_path_factory.mktemp("bleu"), n_train=400, n_valid=12, max_len=6)


@pytest.fixture(scope="module")
def bleu_run(small_bin, tmp_path_factory):
    """One real run with --eval-bleu: (save dir, what it printed)."""
    save = tmp_path_factory.mktemp("with") / "ck"
    run_train([small_bin, *RUN, *BLEU, "--save-dir", save])
    return save


def params(checkpoint) -> dict[str, torch.Tensor]:
    return torch.load(checkpoint, weights_only=True)["model"]


def test_validation_records_bleu_and_chrf(bleu_run):
    valid = read_log(bleu_run, "valid")
    assert [v["num_updates"] for v in valid] == [3, 6]
    for v in valid:
        assert 0 <= v["bleu"] <= 100 and 0 < v["chrf"] <= 100  # chrF of any output of these tokens is above 0
    assert valid[-1]["best_bleu"] == max(v["bleu"] for v in valid)


def test_console_line_and_samples(small_bin, tmp_path, capsys):
    run_train([small_bin, *RUN, *BLEU, "--max-update", "3", "--save-dir", tmp_path / "ck"])
    err = capsys.readouterr().err
    line = next(s for s in err.splitlines() if "valid on 'valid' subset" in s)
    assert re.search(r"\| bleu \d+\.\d\d \| chrf \d+\.\d\d \| best_bleu \d+\.\d\d", line), line
    assert "--eval-bleu valid example hypothesis: " in err and "--eval-bleu valid example reference: t" in err


def test_same_parameters_with_and_without_eval_bleu(small_bin, bleu_run, tmp_path):
    save = tmp_path / "ck"
    run_train([small_bin, *RUN, "--save-dir", save])
    assert "bleu" not in read_log(save, "valid")[0]
    with_bleu, without = params(bleu_run / "checkpoint_last.pt"), params(save / "checkpoint_last.pt")
    assert with_bleu.keys() == without.keys()
    for name in without:
        assert torch.equal(with_bleu[name], without[name]), name


def test_scoring_keeps_the_random_state_and_train_mode(small_bin, tmp_path):
    run = build_run(small_bin, tmp_path / "ck", "task.eval_bleu=true", "model.dropout=0.1")
    model = run.trainer.model
    model.train()
    before = torch.get_rng_state()
    scores = run.bleu.scores(model, "valid", run.data.valid["valid"])
    assert set(scores) == {"bleu", "chrf"}
    assert model.training and all(m.training for m in model.modules())
    assert torch.equal(torch.get_rng_state(), before)


def test_best_checkpoint_and_patience_follow_a_maximized_bleu(small_bin, tmp_path, monkeypatch, capsys):
    """Scores 10, 30, 20, 25: the best is the 2nd validation (loss keeps falling, so the loss would pick the
    last); patience 2 stops after the 4th; the two best files are kept by their bleu."""
    made = itertools.count()
    monkeypatch.setattr(ValidationBleu, "_score",
                        lambda self, model, subset, dataset: {"bleu": [10.0, 30.0, 20.0, 25.0][next(made)],
                                                              "chrf": 50.0})
    save = tmp_path / "ck"
    run_train([small_bin, *RUN, *BLEU, "--max-update", "20", "--validate-interval-updates", "1", "--patience", "2",
               "--keep-best-checkpoints", "2", "--save-dir", save])
    valid = read_log(save, "valid")
    assert [v["bleu"] for v in valid] == [10, 30, 20, 25]
    assert [v["best_bleu"] for v in valid] == [10, 30, 30, 30]
    assert valid[-1]["loss"] < valid[1]["loss"]
    best = torch.load(save / "checkpoint_best.pt", weights_only=True)["training"]
    assert best["num_updates"] == 2 and best["best"] == {"metric": "bleu", "value": 30.0}
    assert sorted(p.name for p in save.glob("checkpoint.best_*")) == ["checkpoint.best_bleu_25.0000.pt",
                                                                      "checkpoint.best_bleu_30.0000.pt"]
    assert "early stop: bleu has not improved for 2 validations" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--eval-bleu-args", '{"bem": 4}'], '--eval-bleu-args: unknown config key "bem". Did you mean "beam"?'),
    (["--eval-bleu-args", '{"beam": 0}'], "--eval-bleu-args: --beam 0: must be >= 1"),
    (["--eval-bleu-args", '{"search": "sampling", "temperature": 0}'],
     "--eval-bleu-args: --temperature 0.0: must be in [0.01, 100]"),
    (["--eval-bleu-args", "beam=4"], "--eval-bleu-args 'beam=4': not valid JSON"),
    (["--eval-bleu-args", "[4]"], "--eval-bleu-args '[4]': give a JSON object of options"),
    (["--eval-bleu-detok", "nope"], "--eval-bleu-detok nope: choose pipeline or a tokenizer plugin: "),
    (["--eval-bleu-detok", "moses", "--eval-bleu-detok-args", '{"x": 1}'], "--eval-bleu-detok-args: "),
    (["--eval-bleu-detok-args", '{"x": 1}'], "--eval-bleu-detok-args: options of a tokenizer named by"),
    (["--eval-bleu-remove-bpe", "@@ "], "--eval-bleu-remove-bpe '@@ ': choose one of pipeline, none"),
])
def test_bad_eval_bleu_options_fail_in_one_line(small_bin, tmp_path, capsys, argv, message):
    save = tmp_path / "ck"
    assert call_train([small_bin, *RUN, "--eval-bleu", *argv, "--save-dir", save]) != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err, err
    assert not list(save.glob("*")) if save.exists() else True  # nothing written


@pytest.mark.parametrize("argv,message", [
    (["--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"],
     "--best-checkpoint-metric bleu: validation reports bleu only with --eval-bleu"),
    (["--eval-bleu", "--best-checkpoint-metric", "chrf"],
     "--best-checkpoint-metric chrf: a higher chrf is better, and without --maximize-best-checkpoint-metric"),
])
def test_bleu_metric_needs_eval_bleu_and_maximize(small_bin, tmp_path, capsys, argv, message):
    assert call_train([small_bin, *RUN, *argv, "--save-dir", tmp_path / "ck"]) != 0
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_resume_with_eval_bleu_is_exact(small_bin, bleu_run, tmp_path):
    """Stopped at update 3 and resumed to 6: the parameters of the uninterrupted run."""
    save = tmp_path / "ck"
    run_train([small_bin, *RUN, *BLEU, "--max-update", "3", "--save-dir", save])
    run_train([small_bin, *RUN, *BLEU, "--save-dir", save])
    assert [v["num_updates"] for v in read_log(save, "valid")] == [3, 6]
    resumed, straight = params(save / "checkpoint_last.pt"), params(bleu_run / "checkpoint_last.pt")
    for name in straight:
        assert torch.equal(resumed[name], straight[name]), name


def test_generate_prints_chrf_beside_bleu(small_bin, bleu_run, capsys):
    code = call_cli(generate_main, [str(small_bin), "--path", str(bleu_run / "checkpoint_last.pt"),
                                    "--gen-subset", "valid", "--beam", "2", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    bleu = next(i for i, s in enumerate(lines) if s.startswith("Generate valid with beam=2: BLEU = "))
    assert lines[bleu + 1].startswith("sacreBLEU signature: nrefs:1|case:mixed|eff:no|tok:13a")
    assert re.fullmatch(r"Generate valid with beam=2: chrF2 = \d+\.\d\d", lines[bleu + 2]), lines[bleu + 2]
    assert re.match(r"sacreBLEU chrF signature: nrefs:1\|case:mixed\|eff:yes\|nc:6\|nw:0\|space:no\|version:",
                    lines[bleu + 3]), lines[bleu + 3]


def generated_scores(capsys, data_bin, checkpoint) -> tuple[float, float]:
    """nmt-generate's BLEU and chrF of ``checkpoint`` on the validation split with --eval-bleu-args' options."""
    code = call_cli(generate_main, [str(data_bin), "--path", str(checkpoint), "--gen-subset", "valid", "--beam", "2",
                                    "--max-len-a", "1.2", "--max-len-b", "4", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return (float(re.search(r"beam=2: BLEU = ([\d.]+)", out).group(1)),
            float(re.search(r"beam=2: chrF2 = ([\d.]+)", out).group(1)))


def test_validation_bleu_is_nmt_generate_bleu(small_bin, bleu_run, capsys):
    """The last validation scored the model checkpoint_last.pt holds: the same translations and references."""
    logged = read_log(bleu_run, "valid")[-1]
    assert logged["chrf"] > 5  # the comparison is not between two empty outputs
    expected = generated_scores(capsys, small_bin, bleu_run / "checkpoint_last.pt")
    assert (logged["bleu"], logged["chrf"]) == pytest.approx(expected, abs=0.01)  # printed with 2 decimals


@pytest.mark.slow
def test_two_ranks_translate_as_one_process(small_bin, tmp_path, capsys):
    """Rank 0 translates the whole split and sends the scores: every rank logs them, and they are what one
    process (nmt-generate) gets from the same weights."""
    save = tmp_path / "ck"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    done = subprocess.run([sys.executable, "-m", "nmt.cli.train", str(small_bin), *map(str, RUN), *BLEU,
                           "--max-update", "3", "--distributed-world-size", "2", "--save-dir", str(save)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    valid = read_log(save, "valid")
    assert [v["num_updates"] for v in valid] == [3]
    expected = generated_scores(capsys, small_bin, save / "checkpoint_last.pt")
    assert (valid[0]["bleu"], valid[0]["chrf"]) == pytest.approx(expected, abs=0.01)


@pytest.fixture(scope="module")
def moses_bpe_bin(tmp_path_factory):
    """A data-bin whose text went through Moses and subword-nmt BPE."""
    from nmt.cli.preprocess import main as preprocess

    folder = tmp_path_factory.mktemp("bpe")
    for split in ("train", "valid"):
        for lang in ("en", "de"):
            (folder / f"{split}.{lang}").write_text("The ballplayers, tired, rested.\nA ballplayer runs.\n" * 5)
    with pytest.raises(SystemExit) as done:
        preprocess(["--source-lang", "en", "--target-lang", "de", "--trainpref", str(folder / "train"),
                    "--validpref", str(folder / "valid"), "--destdir", str(folder / "bin"), "--joined-dictionary",
                    "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-merges", "5"])
    assert done.value.code in (0, None)
    return folder / "bin"


@pytest.mark.parametrize("flags,expected,raw,tokenize", [
    ([], "The ballplayers, tired.", True, None),  # the data-bin's own pipeline, as nmt-generate
    (["eval_bleu_detok=space"], "The ballplayers , tired .", False, None),
    (["eval_tokenized_bleu=true"], "The ballplayers , tired .", False, "none"),
    (["eval_bleu_remove_bpe=none"], "The ba@@ llplayers, tired.", False, None),
])
def test_post_processing_options(moses_bpe_bin, flags, expected, raw, tokenize):
    from omegaconf import OmegaConf

    from nmt.config.loader import resolve_config
    from nmt.config.train import TrainJob
    from nmt.training.validation_bleu import eval_bleu_options

    cfg = OmegaConf.to_object(resolve_config(TrainJob, overrides=[f"task.data={moses_bpe_bin}", "eval_bleu=true",
                                                                   *flags]))
    options = eval_bleu_options(cfg)
    assert options.postprocess("The ba@@ llplayers , tired .") == expected
    assert (options.raw_references, options.tokenize) == (raw, tokenize)
    assert options.generation.beam == 5  # nmt-generate's default
