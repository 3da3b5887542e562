"""Tokenizer plugins of a user's own: from a --user-dir folder, and from an installed package's
``nmt.plugins`` entry point. Both run the real nmt-preprocess in a fresh process."""

import json
import subprocess
import sys
import textwrap

from preprocess_cli_helpers import DE, EN, base_args, run_subprocess, write_corpus

PLUGIN = textwrap.dedent('''
    from nmt.data.text_pipeline import Tokenizer
    from nmt.registry import register_tokenizer


    @register_tokenizer("{name}")
    class ShoutTokenizer(Tokenizer):
        """Upper-cases the text (a tokenizer nobody else has)."""

        def encode(self, line):
            return " ".join(line.upper().split())

        def decode(self, line):
            return line.lower()
''')


def _check_run(proc, dest, name):
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((dest / "metadata.json").read_text())
    assert meta["pipeline"]["tokenizer"]["name"] == name
    assert (dest / "text" / "train.en").read_text().splitlines()[0] == EN[0].upper()
    assert "CAT" in (dest / "dict.en.txt").read_text()


def test_tokenizer_from_user_dir(tmp_path):
    plugins = tmp_path / "my_plugins"
    plugins.mkdir()
    (plugins / "shout.py").write_text(PLUGIN.format(name="shout"))
    train = write_corpus(tmp_path / "raw", "train", EN, DE)
    dest = tmp_path / "bin"
    proc = run_subprocess(["nmt.cli.preprocess", *base_args(train, dest, "--user-dir", plugins, "--tokenizer",
                                                            "shout", "--keep-text", "--workers", "2")])
    _check_run(proc, dest, "shout")
    assert json.loads((dest / "metadata.json").read_text())["pipeline"]["user_dir"] == str(plugins.resolve())
    # at generation time the data-bin names the folder but never imports it: the command's --user-dir does
    code = (f"from nmt.data.text_pipeline import load_text_pipeline\n"
            f"print(load_text_pipeline({str(dest)!r}, 'en').encode('a b'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and f"pass --user-dir {plugins.resolve()}" in out.stderr
    assert "a data-bin never imports code" in out.stderr
    code = f"from nmt.plugin_loader import load_plugins\nload_plugins({str(plugins)!r})\n" + code
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "A B", out.stderr


def test_tokenizer_from_entry_point_package(tmp_path):
    site = tmp_path / "site"
    (site / "shout_pkg").mkdir(parents=True)
    (site / "shout_pkg" / "__init__.py").write_text(PLUGIN.format(name="shout_ep"))
    dist = site / "shout_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: shout-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[nmt.plugins]\nshout = shout_pkg\n")
    train = write_corpus(tmp_path / "raw", "train", EN, DE)
    dest = tmp_path / "bin"
    proc = run_subprocess(["nmt.cli.preprocess", *base_args(train, dest, "--tokenizer", "shout_ep", "--keep-text")],
                          env_extra={"PYTHONPATH": str(site)})
    _check_run(proc, dest, "shout_ep")
    # without the package on the path the name is unknown, and the error says so in one line
    proc = run_subprocess(["nmt.cli.preprocess", *base_args(train, tmp_path / "bin2", "--tokenizer", "shout_ep")])
    assert proc.returncode == 2 and 'unknown tokenizer "shout_ep"' in proc.stderr
    assert not (tmp_path / "bin2").exists()
