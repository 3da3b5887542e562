"""docs/fairseq-migration.md stays honest: every flag in its "nmt" column is accepted by the command
named beside it (it appears in that command's --help), and every plugin name given with a plugin
flag is registered."""

from __future__ import annotations

import re
from pathlib import Path

from test_help import SCRIPTS, option_blocks, run_script

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "fairseq-migration.md"
PLUGIN_FLAGS = {"--arch": "arch", "--optimizer": "optimizer", "--lr-scheduler": "lr_scheduler",
                "--criterion": "criterion", "--search": "search", "--tokenizer": "tokenizer", "--bpe": "bpe",
                "--positional": "positional", "--encoder-positional": "positional",
                "--decoder-positional": "positional", "--attention": "attention"}


def table_rows() -> list[tuple[str, str]]:
    """(nmt column, command column) of each row of the flags table."""
    rows = []
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("fairseq", "---"):
            rows.append((cells[1], cells[2]))
    return rows


def test_every_flag_in_the_table_exists(capsys, monkeypatch):
    from nmt.plugin_loader import load_plugins
    from nmt.registry import REGISTRIES

    load_plugins()
    rows = table_rows()
    assert len(rows) > 50
    helps: dict[str, dict[str, str]] = {}
    checked = 0
    for ours, command in rows:
        flags = re.findall(r"`(--[a-z0-9-]+)(?: ([a-z_0-9]+))?`", ours)
        if not flags:
            assert ours == "(none)" and command == "", f"row without flags: {ours} | {command}"
            continue
        assert command in SCRIPTS, f"{command} is not a console script of pyproject.toml"
        if command not in helps:
            code, out = run_script(command, "--help", capsys=capsys, monkeypatch=monkeypatch)
            assert code == 0
            helps[command] = option_blocks(out)
        for flag, value in flags:
            assert flag in helps[command], f"docs/fairseq-migration.md: {command} has no {flag}"
            if value:
                assert value in REGISTRIES[PLUGIN_FLAGS[flag]], f"{flag} {value}: no such plugin"
            checked += 1
    assert checked > 100
