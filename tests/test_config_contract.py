"""Every declared choice and range is enforced by the real commands, whether it is a config field or a
plugin's own option, given as a flag or as key=value: exit 2, one `nmt-x: error:` line naming what is
allowed, no traceback. And one value lives in one place: --max-source-positions is the model's."""

from __future__ import annotations

import dataclasses
import importlib
import typing
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import torch

from nmt.cli.import_fairseq import SUBCOMMANDS
from nmt.config.loader import leaf_paths
from nmt.fields import allowed_text, flag_of
from nmt.plugin_loader import load_plugins
from nmt.registry import REGISTRIES
from test_generate_setup import call_cli
from train_toy_data import TINY_MODEL, make_toy_task, run_train

COMMANDS = ["prepare", "preprocess", "train", "generate", "interactive", "average_checkpoints", "validate", "plot"]


def commands() -> dict[str, Callable[[list[str]], None]]:
    found = {f"nmt-{name.replace('_', '-')}": importlib.import_module(f"nmt.cli.{name}").main for name in COMMANDS}
    found.update({f"nmt-import-fairseq {name}": main for name, main in SUBCOMMANDS.items()})
    return found


def bad_values(f: dataclasses.Field, tp: Any) -> list[Any]:
    """Values the field's declaration forbids."""
    m = f.metadata
    if m.get("choices"):
        return ["not-a-choice"]
    out: list[Any] = []
    if m.get("low") is not None:
        out.append(m["low"] if m.get("low_open") else m["low"] - 1)
    if m.get("high") is not None:
        out.append(m["high"] if m.get("high_open") else m["high"] + 1)
    if float in typing.get_args(tp) or tp is float:
        out.append("nan")
    return out


def declared_cases() -> Iterator[tuple[str, list[str], str]]:
    """(command, argv, the allowed values the error must name) for every declared choice and range."""
    for prog, main in commands().items():
        schema = main.nmt_schema  # type: ignore[attr-defined]
        for path, f in leaf_paths(schema).items():
            kind = f.metadata.get("plugin_group")
            if kind:
                if f.metadata.get("inherit"):
                    continue  # a site's options are the shared group's flags with the site in front
                yield from plugin_cases(prog, path, f, kind)
                continue
            tp = typing.get_type_hints(_owner(schema, path))[f.name]
            for value in bad_values(f, tp):
                if f.metadata.get("cli", True):
                    argv = [flag_of(f), str(value)]
                else:
                    argv = [f"{path}={value}"]
                yield prog, argv, allowed_text(f) or "finite"


def plugin_cases(prog: str, path: str, group: dataclasses.Field, kind: str) -> Iterator[tuple[str, list[str], str]]:
    registry = REGISTRIES[kind]
    for name in registry.choices():
        cls = registry.config_class(name)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            for value in bad_values(f, hints[f.name]):
                # by flag, and by key=value (a YAML-shaped path inside the plugin's group)
                yield prog, [flag_of(group), name, flag_of(f), str(value)], allowed_text(f) or "finite"
                yield prog, [f"{path}.name={name}", f"{path}.{f.name}={value}"], allowed_text(f) or "finite"


def _owner(schema: type, path: str) -> type:
    cls = schema
    for part in path.split(".")[:-1]:
        cls = typing.get_type_hints(cls)[part]
    return cls


load_plugins()  # the walk below reads the registries when the module is collected
CASES = list(declared_cases())


def test_the_walk_finds_the_declarations():
    flags = {" ".join(argv) for _, argv, _ in CASES}
    for expected in ("--ddp-backend not-a-choice", "--activation-fn not-a-choice", "--dropout 1", "--lr -1",
                     "--update-freq 0", "--seed -1", "--beam 0", "--lenpen nan",
                     "--criterion label_smoothed_cross_entropy --label-smoothing 1",
                     "--attention restricted --attention-window -1", "--input-format not-a-choice"):
        assert expected in flags, expected
    assert len(CASES) > 150


@pytest.mark.parametrize("prog,argv,allowed", CASES, ids=[f"{p} {' '.join(a)}" for p, a, _ in CASES])
def test_a_declared_choice_or_range_is_enforced(prog, argv, allowed, capsys):
    code = call_cli(commands()[prog], argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error:"), err
    assert allowed in lines[0] and "Traceback" not in err, err


@pytest.mark.parametrize("argv", [["--ddp-backend", "foo"], ["--activation-fn", "swish"]])
def test_the_issues_examples_name_the_allowed_values(argv, capsys):
    from nmt.cli.train import main

    code = call_cli(main, argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("nmt-train: error:") and "\n" not in err
    assert ("pytorch_ddp, c10d, legacy_ddp" if argv[0] == "--ddp-backend" else "relu, gelu") in err


@pytest.mark.parametrize("yaml_text,where", [("model:\n  dropout: 1.5\n", "--dropout"),
                                             ("optimizer:\n  name: adam\n  adam_eps: -1\n", "adam_eps"),
                                             ("model:\n  attention: {name: restricted, attention_window: -2}\n",
                                              "attention_window")])
def test_yaml_values_are_checked_too(tmp_path, capsys, yaml_text, where):
    from nmt.cli.train import main

    (tmp_path / "c.yaml").write_text(yaml_text)
    code = call_cli(main, ["--config", tmp_path / "c.yaml"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("nmt-train: error:") and "\n" not in err and where in err, err


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return make_toy_task(tmp_path_factory.mktemp("positions"), n_train=80, n_valid=8, min_len=3, max_len=12)


@pytest.mark.parametrize("spelling", [["model.max_source_positions=8"], ["--max-source-positions", "8"]])
def test_the_source_position_limit_is_one_value_honoured_everywhere(toy, tmp_path, spelling):
    """It filters the training data and sizes the learned positional table (before, the task's copy
    overwrote the model's, so a model.* override trained on longer sentences)."""
    from nmt.checkpoint.format import load_checkpoint

    save = tmp_path / "ck"
    run_train([toy, *TINY_MODEL, "--positional", "learned", "--skip-invalid-size-inputs-valid-test",
               "--max-update", "2", "--max-tokens", "256", "--num-threads", "1", "--save-dir", save, *spelling])
    state = load_checkpoint(save / "checkpoint_last.pt")
    assert state["config"]["model"]["max_source_positions"] == 8
    assert "max_source_positions" not in state["config"]["task"]
    # 8 rows: a longer sentence reaching the model would have stopped training, so they were left out
    assert state["model"]["encoder.embedder.positional.weight"].shape[0] == 8


def test_a_too_long_sentence_without_skipping_names_the_one_flag(toy, tmp_path, capsys):
    from nmt.cli.train import main

    code = call_cli(main, [toy, *TINY_MODEL, "--max-source-positions", "8", "--max-update", "1",
                           "--save-dir", tmp_path / "ck"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "--max-source-positions" in err[0], err


def test_a_criterion_logs_a_figure_of_its_own(toy, tmp_path):
    """A criterion of the user's adds its sums and reduces them: the figure appears in train_log.jsonl
    for training and validation, with no core change."""
    import json

    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "accuracy_ce.py").write_text('''
from nmt.registry import register_criterion
from nmt.training.criterion import Criterion, label_smoothed_nll_loss, loss_metrics


@register_criterion("accuracy_ce")
class AccuracyCrossEntropy(Criterion):
    """Cross-entropy that also logs the share of target tokens the model ranks first."""

    logged_sums = Criterion.logged_sums + ("correct",)

    def forward(self, model, sample):
        logits, target = self.non_pad_logits(model, sample)
        loss, nll_loss = label_smoothed_nll_loss(logits, target, 0.0)
        log = {"loss": float(loss.detach()), "nll_loss": float(nll_loss.detach()), "ntokens": int(target.numel()),
               "nsentences": int(sample["target"].size(0)), "sample_size": int(target.numel()),
               "correct": int((logits.argmax(-1) == target).sum())}
        return loss, target.numel(), log

    def reduce_metrics(self, sums):
        return {**loss_metrics(sums), "accuracy": sums["correct"] / max(sums["ntokens"], 1)}
''')
    save = tmp_path / "ck"
    run_train([toy, *TINY_MODEL, "--user-dir", plugins, "--criterion", "accuracy_ce", "--max-update", "3",
               "--max-tokens", "256", "--num-threads", "1", "--log-interval", "1", "--save-dir", save,
               "--skip-invalid-size-inputs-valid-test"])
    records = [json.loads(line) for line in (save / "train_log.jsonl").read_text().splitlines()]
    for kind in ("train_inner", "valid"):
        values = [r["accuracy"] for r in records if r["kind"] == kind]
        assert values and all(0.0 <= v <= 1.0 for v in values), (kind, records[:3])
    torch.set_num_threads(1)


@pytest.mark.parametrize("argv", [["common.seed=${nope}"], ["--save-dir", "${oc.env:HOME}/x"],
                                  ["model.dropout=${oc.env:NMT_TEST_SECRET}"]])
def test_interpolation_is_refused_in_one_line_and_never_resolved(argv, capsys, monkeypatch):
    from nmt.cli.train import main

    monkeypatch.setenv("NMT_TEST_SECRET", "0.3")
    code = call_cli(main, argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("nmt-train: error:") and "\n" not in err, err
    assert "interpolation is not resolved" in err and "0.3" not in err
