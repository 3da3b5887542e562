"""nmt-prepare multi30k: from a local copy, reuse on rerun, and a clear failure offline."""


import pytest

import nmt.data.prepare as prepare_module
from nmt.cli.prepare import main as prepare_main
from shared_paths import MULTI30K


def run(argv, capsys):
    with pytest.raises(SystemExit) as e:
        prepare_main([str(a) for a in argv])
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.mark.skipif(not (MULTI30K / "train.en.gz").is_file(), reason="Multi30k not available")
def test_from_local_copy_then_reused(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(prepare_module.MULTI30K_ENV, raising=False)
    code, out, err = run(["multi30k", "--dest", tmp_path / "raw", "--from", MULTI30K], capsys)
    assert code == 0, err
    lines = {f.name: f.read_text(encoding="utf-8").count("\n") for f in (tmp_path / "raw").iterdir()
             if not f.name.startswith(".")}
    assert lines == {f"{s}.{lang}": n for s, n in (("train", 29000), ("valid", 1014), ("test", 1000))
                     for lang in ("en", "de", "fr")}
    code, out, _ = run(["multi30k", "--dest", tmp_path / "raw"], capsys)  # no --from needed now
    assert code == 0 and "already holds Multi30k" in out


def test_offline_fails_at_once_and_says_how_to_use_a_local_copy(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(prepare_module.MULTI30K_ENV, raising=False)
    monkeypatch.setattr(prepare_module, "MULTI30K_URL", "http://nmt-offline.invalid/{name}.gz")
    code, _, err = run(["multi30k", "--dest", tmp_path / "raw"], capsys)
    assert code == 1 and err.count("\n") == 1
    assert "cannot download" in err and "--from DIR" in err and "NMT_MULTI30K_DIR" in err
    assert not (tmp_path / "raw").exists() or not any((tmp_path / "raw").iterdir())


def test_bad_dataset_and_bad_local_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(prepare_module.MULTI30K_ENV, raising=False)
    code, _, err = run(["wmt99", "--dest", tmp_path], capsys)
    assert code == 2 and "unknown dataset" in err and "multi30k" in err
    monkeypatch.setenv(prepare_module.MULTI30K_ENV, str(tmp_path / "nowhere"))
    code, _, err = run(["multi30k", "--dest", tmp_path / "raw"], capsys)
    assert code == 2 and "NMT_MULTI30K_DIR" in err and "nowhere" in err
    (tmp_path / "partial").mkdir()
    code, _, err = run(["multi30k", "--dest", tmp_path / "raw", "--from", tmp_path / "partial"], capsys)
    assert code == 1 and "train.en" in err
