"""nmt-export's model folder: what it holds, that every command translating or scoring with a checkpoint
+ data-bin gives exactly the same with the folder, that loading it runs no pickle, and that a damaged
folder or a bad export is one line and leaves nothing half-written."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from model_folder_setup import export, without_timing
from nmt.cli.average_checkpoints import main as average_main
from nmt.cli.export import main as export_main
from nmt.cli.generate import main as generate_main
from nmt.cli.interactive import main as interactive_main
from nmt.cli.validate import main as validate_main
from reliability_helpers import checksums, fails_cleanly
from test_generate_setup import call_cli, make_data_bin

FILES = {"README.md", "bpe.codes", "dict.en.txt", "dict.de.txt", "metadata.json", "model.json", "model.safetensors"}


def run(main, argv, capsys) -> str:
    """A command's stdout (it must succeed), timing lines left out."""
    capsys.readouterr()
    code = call_cli(main, argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return "\n".join(without_timing(out))


def copy_folder(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def leftovers(parent: Path) -> list[str]:
    """Temporary folders nmt-export left in ``parent`` (``.NAME.tmp-XXXX``, nmt.data.work_dirs)."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".") and (".tmp" in p.name or ".old" in p.name))


def test_the_folder_holds_weights_config_dictionaries_pipeline_and_card(exported_model):
    folder = exported_model.folder
    assert {p.name for p in folder.iterdir()} == FILES
    manifest = json.loads((folder / "model.json").read_text())
    assert manifest["format"] == "nmt-model-folder" and manifest["format_version"] == 1
    assert (manifest["source_lang"], manifest["target_lang"]) == ("en", "de")
    assert manifest["weights"]["bytes"] == (folder / "model.safetensors").stat().st_size
    assert manifest["criterion"]["label_smoothing"] == 0.3  # nmt-validate scores with it
    assert manifest["exported_from"] == [str(exported_model.pair[-1])]
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["splits"] == {} and metadata["pipeline"]["tokenizer"]["name"] == "moses"
    assert metadata["pipeline"]["bpe"]["name"] == "subword_nmt"
    assert (folder / "bpe.codes").read_bytes() == (exported_model.data / "bpe.codes").read_bytes()
    card = (folder / "README.md").read_text()
    for needed in ("en -> de", f"{manifest['parameters']:,}", "moses", "subword_nmt", "60 sentence pairs",
                   "nmt.load"):
        assert needed in card, card
    averaged = json.loads((exported_model.averaged / "model.json").read_text())
    assert len(averaged["exported_from"]) == 2 and "Checkpoints averaged**: 2" in (
        exported_model.averaged / "README.md").read_text()
    assert leftovers(folder.parent) == []


@pytest.mark.parametrize("beam", ["5", "1"])
def test_generate_with_the_folder_prints_what_the_checkpoint_prints(exported_model, capsys, beam):
    data = exported_model.data
    options = ["--beam", beam, "--threads", "1", "--print-alignment"]
    with_checkpoint = run(generate_main, [data, "--path", exported_model.pair[-1], *options], capsys)
    assert "H-0\t" in with_checkpoint and "BLEU = " in with_checkpoint
    assert run(generate_main, [data, "--path", exported_model.folder, *options], capsys) == with_checkpoint


def test_the_averaged_folder_translates_like_nmt_average_checkpoints(exported_model, capsys, tmp_path):
    data = exported_model.data
    averaged = tmp_path / "avg.pt"
    assert call_cli(average_main, ["--inputs", ":".join(map(str, exported_model.pair)), "--output", averaged]) == 0
    options = ["--beam", "4", "--nbest", "2", "--threads", "1"]
    expected = run(generate_main, [data, "--path", averaged, *options], capsys)
    assert run(generate_main, [data, "--path", exported_model.averaged, *options], capsys) == expected


def test_interactive_takes_the_folder_alone_or_as_path(exported_model, capsys):
    data, folder = exported_model.data, exported_model.folder
    options = ["--input", exported_model.raw / "test.en", "--verbose", "--beam", "3", "--threads", "1"]
    expected = run(interactive_main, [data, "--path", exported_model.pair[-1], *options], capsys)
    assert len([line for line in expected.splitlines() if line.startswith("D-")]) == 9
    assert run(interactive_main, [folder, *options], capsys) == expected
    assert run(interactive_main, [data, "--path", folder, *options], capsys) == expected
    assert run(interactive_main, ["--path", folder, *options], capsys) == expected


def test_validate_scores_the_folder_with_its_own_criterion(exported_model, capsys):
    def figures(path: Path) -> list[str]:
        out = run(validate_main, [exported_model.data, "--path", path, "--valid-subset", "test", "--threads", "1"],
                  capsys)
        return [part for part in out.split(" | ") if not part.startswith("wps")][:-1]  # no speed, no name

    expected = figures(exported_model.pair[-1])
    assert expected[0] == "valid on 'test' subset" and expected[1].startswith("loss ")
    assert figures(exported_model.folder) == expected


def test_a_folder_given_as_data_to_generate_is_refused(exported_model, capsys):
    folder = exported_model.folder
    line = fails_cleanly(generate_main, "nmt-generate", [folder, "--path", folder], 2,
                         (str(folder), "model folder", "--path"), [folder], capsys)
    assert "DATA_BIN --path" in line
    fails_cleanly(validate_main, "nmt-validate", [folder, "--path", folder], 2, (str(folder), "model folder"),
                  [folder], capsys)


def test_bf16_weights_load_as_their_rounded_float32_values(exported_model, capsys, tmp_path):
    from nmt.model_folder.layout import load_model_folder

    half = tmp_path / "bf16"
    assert export(exported_model.data, "--path", exported_model.pair[-1], "--output", half, "--bf16") == 0
    full_size = (exported_model.folder / "model.safetensors").stat().st_size
    assert (half / "model.safetensors").stat().st_size < 0.6 * full_size
    assert json.loads((half / "model.json").read_text())["weights"]["dtype"] == "bfloat16"
    _, full, _ = load_model_folder(exported_model.folder)
    _, rounded, _ = load_model_folder(half)
    assert rounded.keys() == full.keys()
    for name, t in full.items():
        assert rounded[name].dtype == torch.float32
        assert torch.equal(rounded[name], t.to(torch.bfloat16).float()), name
    assert "H-0\t" in run(generate_main, [exported_model.data, "--path", half, "--threads", "1"], capsys)


def flip_a_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))


def truncate(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) - 100])


@pytest.mark.parametrize("damage, needles", [(flip_a_byte, ("sha256", "changed or damaged")),
                                             (truncate, ("bytes", "truncated"))], ids=["flipped", "truncated"])
def test_damaged_weights_are_refused_in_one_line(exported_model, capsys, tmp_path, damage, needles):
    folder = copy_folder(exported_model.folder, tmp_path / "model")
    damage(folder / "model.safetensors")
    weights = str(folder / "model.safetensors")
    for main, prog, argv in [(generate_main, "nmt-generate", [exported_model.data, "--path", folder]),
                             (interactive_main, "nmt-interactive", [folder, "--input", exported_model.raw / "test.en"]),
                             (validate_main, "nmt-validate", [exported_model.data, "--path", folder,
                                                              "--valid-subset", "test"])]:
        line = fails_cleanly(main, prog, argv, 1, (weights, *needles, "nmt-export"), [folder], capsys)
        assert len(line) < 300


def edit_manifest(folder: Path, edit) -> None:
    manifest = json.loads((folder / "model.json").read_text())
    edit(manifest)
    (folder / "model.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage, code, needles", [
    (lambda f: (f / "model.json").write_text('{"format": "nmt-model-folder", "format_'), 1, ("not valid",)),
    (lambda f: edit_manifest(f, lambda m: m.update(format_version=99)), 1, ("format 99", "upgrade nmt")),
    (lambda f: edit_manifest(f, lambda m: m.pop("weights")), 1, ('"weights"',)),
    (lambda f: edit_manifest(f, lambda m: m["model_config"].update(encoder_layers=3)), 1, ("model folder",)),
    (lambda f: (f / "dict.de.txt").write_text("zz" + (f / "dict.de.txt").read_text()), 1, ("target dictionary",)),
], ids=["not-json", "newer-format", "no-weights-record", "edited-config", "edited-dictionary"])
def test_a_damaged_folder_is_refused_in_one_line(exported_model, capsys, tmp_path, damage, code, needles):
    folder = copy_folder(exported_model.folder, tmp_path / "model")
    damage(folder)
    fails_cleanly(interactive_main, "nmt-interactive", [folder, "--input", exported_model.raw / "test.en"], code,
                  needles, [folder], capsys)


def test_weights_replaced_together_with_their_hash_are_still_parsed_safely(exported_model, capsys, tmp_path):
    """Whoever rewrites model.json may give any file a matching sha256: its content must still be read as
    safetensors, never run, and garbage is one line."""
    from nmt.model_folder.layout import sha256_of

    folder = copy_folder(exported_model.folder, tmp_path / "model")
    weights = folder / "model.safetensors"
    weights.write_bytes(b"\xff" * 64)
    edit_manifest(folder, lambda m: m["weights"].update(bytes=64, sha256=sha256_of(weights)))
    fails_cleanly(generate_main, "nmt-generate", [exported_model.data, "--path", folder], 1,
                  (str(weights), "not a readable safetensors file"), [folder], capsys)


def test_an_existing_output_is_refused_untouched_and_force_replaces_a_model_folder(exported_model, capsys, tmp_path):
    data, ckpt = exported_model.data, exported_model.pair[0]
    target = copy_folder(exported_model.folder, tmp_path / "model")
    fails_cleanly(export_main, "nmt-export", [data, "--path", ckpt, "--output", target], 2,
                  (str(target), "--force"), [target], capsys)
    assert export(data, "--path", ckpt, "--output", target, "--force") == 0
    assert json.loads((target / "model.json").read_text())["exported_from"] == [str(ckpt)]
    assert {p.name for p in target.iterdir()} == FILES
    assert leftovers(tmp_path) == []

    mine = tmp_path / "my_files"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    fails_cleanly(export_main, "nmt-export", [data, "--path", ckpt, "--output", mine, "--force"], 2,
                  (str(mine), "not a model folder"), [mine], capsys)


def test_a_failed_export_leaves_nothing_behind(exported_model, capsys, tmp_path, monkeypatch):
    data, ckpt = exported_model.data, exported_model.pair[-1]
    out = tmp_path / "deeper" / "model"
    fails_cleanly(export_main, "nmt-export", [data, "--path", ckpt, "--output", out, "--scores", tmp_path / "none.txt"],
                  2, ("--scores", "none.txt"), [], capsys)
    no_bleu = tmp_path / "no_bleu.txt"
    no_bleu.write_text("H-0\t-1.0\tsomething\n")
    fails_cleanly(export_main, "nmt-export", [data, "--path", ckpt, "--output", out, "--scores", no_bleu],
                  2, ("--scores", "BLEU"), [], capsys)
    other = make_data_bin(tmp_path / "other", n_train=30, seed=5)  # another vocabulary
    fails_cleanly(export_main, "nmt-export", [other, "--path", ckpt, "--output", out], 1,
                  ("dictionary", str(ckpt)), [other], capsys)
    assert not (tmp_path / "deeper").exists()

    import safetensors.torch

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", disk_full)
    fails_cleanly(export_main, "nmt-export", [data, "--path", ckpt, "--output", out], 1, ("No space",), [], capsys)
    assert not (tmp_path / "deeper").exists()  # neither the folder, its temporary sibling, nor the parents made


def test_scores_put_bleu_and_signature_into_the_card_and_manifest(exported_model, capsys, tmp_path):
    generated = run(generate_main, [exported_model.data, "--path", exported_model.pair[-1], "--threads", "1"], capsys)
    scores = tmp_path / "generate-test.txt"
    scores.write_text(generated + "\n")
    bleu = next(line for line in generated.splitlines() if line.startswith("Generate test with beam=5: "))
    signature = next(line for line in generated.splitlines() if line.startswith("sacreBLEU signature: "))
    out = tmp_path / "scored"
    assert export(exported_model.data, "--path", exported_model.pair[-1], "--output", out, "--scores", scores) == 0
    recorded = json.loads((out / "model.json").read_text())["scores"]
    assert recorded["split"] == "test" and recorded["beam"] == 5
    assert bleu.endswith(recorded["bleu"]) and recorded["signature"] == signature.split()[2]
    card = (out / "README.md").read_text()
    assert recorded["bleu"] in card and recorded["signature"] in card and "raw/test.de" in card


def test_loading_the_folder_never_unpickles(exported_model, monkeypatch):
    import nmt

    def refuse(*args, **kwargs):
        raise AssertionError("a model folder must load without pickle")

    for module, name in [(pickle, "Unpickler"), (pickle, "load"), (pickle, "loads"), (torch, "load")]:
        monkeypatch.setattr(module, name, refuse)
    model = nmt.load(exported_model.folder, threads=1)
    assert model.translate(["the cat sat on the mat."], beam=2)[0]
    with pytest.raises(AssertionError, match="without pickle"):  # the patches do catch a checkpoint's loading
        nmt.load(exported_model.pair[-1], data=exported_model.data)


def test_an_old_format_checkpoint_exports_and_translates_as_before(capsys, tmp_path):
    """The stored format-1 checkpoint (tests/fixtures/checkpoint_v1): its migrated config goes into the
    folder, which prints what the checkpoint printed then."""
    fixture = Path(__file__).resolve().parent / "fixtures" / "checkpoint_v1"
    folder = tmp_path / "v1"
    before = checksums(fixture)
    assert export(fixture / "data-bin", "--path", fixture / "checkpoint_v1.pt", "--output", folder) == 0
    out = run(generate_main, [fixture / "data-bin", "--path", folder, "--gen-subset", "valid", "--beam", "5",
                              "--print-alignment"], capsys)

    def lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if line[:2] in ("H-", "P-", "A-")]

    assert lines(out) == lines((fixture / "generate_valid_beam5.txt").read_text())
    assert checksums(fixture) == before  # nothing written beside the fixture
