"""Config YAML within bounds: an alias bomb ("billion laughs") or thousands of nested brackets, as a
--config file, a key=value override or a flag value, end `nmt-train` at once with exit 2 and one line
naming where, instead of hanging or overflowing the recursion; ordinary YAML reads as safe_load reads it."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nmt.config.safe_yaml import MAX_DEPTH, parse_yaml, shortened
from nmt.errors import ConfigError
from train_toy_data import TINY_MODEL, call_train, make_toy_task

DEEP = 10_000


def bomb_levels() -> list[str]:
    """Nine levels of nine aliases: 9**9 (387 million) strings once expanded, from about 400 bytes."""
    levels = ["&l0 [" + ", ".join(["lol"] * 9) + "]"]
    levels += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return levels


BOMB_FILE = "common:\n" + "".join(f"  x{i}: {level}\n" for i, level in enumerate(bomb_levels()))
BOMB_VALUE = "[" + ", ".join(bomb_levels()) + "]"
DEEP_VALUE = "[" * DEEP + "]" * DEEP


@pytest.mark.parametrize("text", [
    "common:\n  seed: 3\noptimization:\n  lr: [0.001]\n",
    "base: &base {lr: 0.1, warmup: 4}\nrun: {<<: *base, warmup: 8}\nlist: [*base, *base]\n",
    "(0.9, 0.98)", "", "~", "a: 'x: y'\n",
])
def test_ordinary_yaml_reads_as_safe_load_reads_it(text):
    assert parse_yaml(text, "--config c.yaml") == yaml.safe_load(text)


@pytest.mark.parametrize("text,words", [
    (BOMB_FILE, "aliases expand to more than 100,000 values"),
    ("common:\n  seed: " + DEEP_VALUE + "\n", f"nested more than {MAX_DEPTH} levels"),
    ("a: " + "{b: " * DEEP + "1" + "}" * DEEP, f"nested more than {MAX_DEPTH} levels"),
    ("a: &a [1, *a]\n", "refers to a value that contains it"),
    ("a: " + "x" * (1 << 20) + "\n", "bytes of YAML, more than the 1,048,576 allowed"),
])
def test_unbounded_yaml_is_refused_naming_where(text, words):
    with pytest.raises(ConfigError) as refused:
        parse_yaml(text, "--config c.yaml")
    message = str(refused.value)
    assert message.startswith("--config c.yaml: ") and words in message and "\n" not in message


def test_text_that_is_not_yaml_stays_a_yaml_error():
    """Callers keep their fallback: an override value that is not YAML is taken as a string."""
    with pytest.raises(yaml.YAMLError):
        parse_yaml("a: [", "--config c.yaml")


def test_an_override_is_quoted_shortened_and_a_config_path_whole(tmp_path):
    """The override's text is shortened to one line; a --config path is never cut (CI's temp paths are long)."""
    with pytest.raises(ConfigError) as refused:
        parse_yaml(BOMB_VALUE, f'override "{shortened(f"common.seed={BOMB_VALUE}")}"')
    where = str(refused.value).split(": YAML")[0]
    assert where.startswith('override "common.seed=[&l0 [lol') and where.endswith('..."') and "\n" not in where
    long_path = tmp_path / ("a-long-folder-name-" * 8) / "bomb.yaml"
    with pytest.raises(ConfigError) as refused:
        parse_yaml(BOMB_VALUE, f"--config {long_path}")
    assert str(refused.value).startswith(f"--config {long_path}: ")


def test_a_yaml_flag_value_is_bounded_too():
    """Flags of list/dict/Any fields (plugins may declare them) read their text as YAML."""
    import click

    from nmt.config.cli_options import YamlValue

    option = click.Option(["--my-list"], type=YamlValue())
    assert YamlValue().convert("[1, 2]", option, None) == [1, 2]
    assert YamlValue().convert("a: [", option, None) == "a: ["  # not YAML: the text itself
    with pytest.raises(ConfigError, match="^--my-list: YAML aliases expand"):
        YamlValue().convert(BOMB_VALUE, option, None)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_toy_task(tmp_path_factory.mktemp("yaml"), n_train=20, n_valid=4)


def train_argv(data: Path, save_dir: Path, *extra: str) -> list[str]:
    return [str(data), *TINY_MODEL, "--num-threads", "1", "--save-dir", str(save_dir), *extra]


def assert_one_line(code: int, err: str, where: str, words: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err[-3000:]
    assert "Traceback" not in err and len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"nmt-train: error: {where}") and words in lines[0], lines[0]


@pytest.mark.parametrize("as_config", [True, False], ids=["config-file", "override"])
def test_deep_nesting_is_one_line(data, tmp_path, capsys, as_config):
    config = tmp_path / "deep.yaml"
    config.write_text("common:\n  seed: " + DEEP_VALUE + "\n")
    before = hashlib.sha256(config.read_bytes()).hexdigest()
    extra = ["--config", str(config)] if as_config else ["common.seed=" + DEEP_VALUE]
    capsys.readouterr()
    code = call_train(train_argv(data, tmp_path / "ck", *extra))
    where = f"--config {config}: " if as_config else 'override "common.seed=[[[['
    assert_one_line(code, capsys.readouterr().err, where, f"YAML nested more than {MAX_DEPTH} levels deep")
    assert hashlib.sha256(config.read_bytes()).hexdigest() == before
    assert not (tmp_path / "ck").exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["config-file", "override"])
def test_alias_bomb_is_one_line_in_a_real_process(data, tmp_path, how):
    """A fresh nmt-train process; the timeout only guards against the hang this test is about."""
    config = tmp_path / "bomb.yaml"
    config.write_text(BOMB_FILE)
    before = hashlib.sha256(config.read_bytes()).hexdigest()
    extra = ["--config", str(config)] if how == "config-file" else ["common.seed=" + BOMB_VALUE]
    done = subprocess.run([sys.executable, "-m", "nmt.cli.train", *train_argv(data, tmp_path / "ck", *extra)],
                          capture_output=True, text=True, timeout=120)
    where = f"--config {config}: " if how == "config-file" else 'override "common.seed=[&l0 [lol'
    assert_one_line(done.returncode, done.stderr, where, "YAML aliases expand to more than 100,000 values")
    assert hashlib.sha256(config.read_bytes()).hexdigest() == before
    assert not (tmp_path / "ck").exists()
