"""The generated reference pages (docs/configuration-reference.md, docs/plugins.md) must match the
code: a new option or plugin without `python scripts/gen_docs.py` fails here."""

from __future__ import annotations

from repo_scripts import ROOT, load_gen_docs


def test_generated_docs_are_up_to_date():
    gen = load_gen_docs()
    for name, render in gen.GENERATED.items():
        committed = (ROOT / "docs" / name).read_text(encoding="utf-8")
        assert committed == render(), f"docs/{name} is stale: run python scripts/gen_docs.py"


def test_reference_covers_every_command_and_option():
    """Spot checks that the generator walks everything: each console script, nested groups,
    YAML-only keys, and plugin options."""
    gen = load_gen_docs()
    reference = gen.render_configuration_reference()
    for prog, target in gen.console_scripts().items():
        for name, _ in gen.command_entries(prog, target):
            assert f"## {name}\n" in reference
    assert "| `--max-tokens` | `task.max_tokens` | int | (none) |" in reference
    assert "| `--lr` | `optimization.lr` | float | `0.0005` |" in reference
    assert "| `--max-source-positions` | `model.max_source_positions` | int | `1024` |" in reference
    assert "| (YAML / key=value) | `model.decoder_start` | str | `<s>` |" in reference
    assert "| `--optimizer` | `optimizer.name` | str | `adam` |" in reference
    plugins = gen.render_plugins()
    assert "| `--adam-betas` | `adam_betas` | str | `(0.9, 0.999)` |" in plugins
    for kind in ("attention", "positional", "optimizer", "lr-scheduler", "criterion", "search", "arch"):
        assert f"\n## {kind}\n" in plugins


def test_check_mode_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    gen = load_gen_docs()
    for name, render in gen.GENERATED.items():
        (tmp_path / name).write_text(render(), encoding="utf-8")
    monkeypatch.setattr(gen, "DOCS", tmp_path)
    assert gen.main(["--check"]) == 0
    (tmp_path / "plugins.md").write_text("old\n", encoding="utf-8")
    assert gen.main(["--check"]) == 1
    assert "docs/plugins.md is stale" in capsys.readouterr().err
