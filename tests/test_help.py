"""Every console script in pyproject.toml answers --help (exit 0) with its options and their
defaults; nmt-train's help is grouped, and `--arch help` / `--list-plugins` list the plugins.

The entry points are called in this process (pyproject's module:function), so a script added to
pyproject is checked even before `pip install -e .` puts it on PATH."""

from __future__ import annotations

import dataclasses
import importlib
import re
import typing

import pytest

from repo_scripts import load_gen_docs

SCRIPTS: dict[str, str] = load_gen_docs().console_scripts()


def entries() -> list[tuple[str, object]]:
    """(name, entry function) of every console script, and of each subcommand of one that has them."""
    gen = load_gen_docs()
    return [e for prog, target in SCRIPTS.items() for e in gen.command_entries(prog, target)]


def run_entry(main, *args: str, capsys, monkeypatch) -> tuple[int, str]:
    """An entry point called in this process: its exit code and stdout."""
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code or 0
    return code, capsys.readouterr().out


def run_script(prog: str, *args: str, capsys, monkeypatch) -> tuple[int, str]:
    module, func = SCRIPTS[prog].split(":")
    return run_entry(getattr(importlib.import_module(module), func), *args, capsys=capsys, monkeypatch=monkeypatch)


def option_blocks(help_text: str) -> dict[str, str]:
    """Flag -> its help text (the option line and its wrapped continuation lines)."""
    blocks: dict[str, str] = {}
    current = None
    for line in help_text.splitlines():
        match = re.match(r"^ {2}(?:-[a-z], )?(--[a-z0-9-]+)", line)
        if match:
            current = match.group(1)
            blocks[current] = line
        elif current and line.startswith("    "):
            blocks[current] += " " + line.strip()
        else:
            current = None
    return blocks


def fields_with_defaults(schema: type) -> dict[str, object]:
    """Flag -> default of every command-line field whose default is a value (not None)."""
    out: dict[str, object] = {}
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if dataclasses.is_dataclass(hints[f.name]):
            out.update(fields_with_defaults(hints[f.name]))
        elif f.metadata.get("cli", True):
            default = f.default_factory()["name"] if f.metadata.get("plugin_group") else f.default
            if default is not None and default is not dataclasses.MISSING:
                out[f.metadata.get("flag") or "--" + f.name.replace("_", "-")] = default
    return out


@pytest.mark.parametrize("prog", sorted(SCRIPTS))
def test_every_console_script_answers_help(prog, capsys, monkeypatch):
    code, out = run_script(prog, "--help", capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0
    assert f"Usage: {prog}" in out


@pytest.mark.parametrize("name,main", entries(), ids=lambda v: v if isinstance(v, str) else "")
def test_help_lists_options_with_defaults(name, main, capsys, monkeypatch):
    code, out = run_entry(main, "--help", capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0
    assert f"Usage: {name}" in out
    blocks = option_blocks(out)
    assert "--help" in blocks
    schema = getattr(main, "nmt_schema", None)
    if schema is None:  # a command not built from a config dataclass: options must still be listed
        assert len(blocks) > 1, out
        return
    for flag, default in fields_with_defaults(schema).items():
        assert flag in blocks, f"{name} --help does not list {flag}"
        assert "[default:" in blocks[flag], f"{name} --help: {flag} does not show its default ({default!r})"


def test_train_help_is_grouped(capsys, monkeypatch):
    _, out = run_script("nmt-train", "--help", capsys=capsys, monkeypatch=monkeypatch)
    sections = re.findall(r"^([A-Z][a-z ]+):$", out, flags=re.M)
    for wanted in ("Common", "Task", "Model", "Optimization", "Optimizer", "Lr scheduler", "Criterion",
                   "Checkpoint", "Distributed training", "Precision", "Logging"):
        assert wanted in sections, sections
    blocks = option_blocks(out)
    assert "(optimizer adam, adamw)" in blocks["--adam-betas"]  # a plugin's option names its plugin


@pytest.mark.parametrize("args", [("--arch", "help"), ("--list-plugins",)])
def test_train_lists_architectures_and_plugins(args, capsys, monkeypatch):
    code, out = run_script("nmt-train", *args, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0
    for kind, name in (("arch", "transformer_base"), ("arch", "transformer_big"), ("attention", "additive"),
                       ("attention", "restricted"), ("positional", "learned"), ("optimizer", "adam"),
                       ("lr_scheduler", "inverse_sqrt"), ("criterion", "label_smoothed_cross_entropy"),
                       ("search", "beam"), ("tokenizer", "moses"), ("bpe", "subword_nmt")):
        section = out.split(f"{kind} (")[1]
        assert re.search(rf"^ {{2}}{name} ", section, flags=re.M), f"{name} missing under {kind}"
