"""Sharded data-bins (fairseq's convention), through the real commands: nmt-preprocess --num-shards
writes DESTDIR/shard0..., nmt-train DATA0:DATA1 trains epoch k on shard (k-1) mod n and validates on
the first shard, a run stopped in a shard's epoch or at the change of shard resumes bit-identically,
and the commands that need only the dictionaries read the first shard."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest

from nmt.checkpoint.format import load_checkpoint
from tests.preprocess_cli_helpers import run_preprocess, snapshot
from tests.test_resume import (
    MAX_UPDATE,
    SRC,
    TGT,
    assert_same_training,
    run_and_kill,
    saved_updates,
    train_command,
)
from tests.train_toy_data import call_train, read_log, run_train

pytestmark = pytest.mark.slow

SHARDS = 2
LOSSES = ("loss", "nll_loss")


def write_reverse_task(folder: Path, n_train: int, seed: int = 0) -> str:
    """A reverse-the-letters task as text (train, valid, test); returns the folder's prefix root."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("valid", 8), ("test", 6)):
        lines = [" ".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 6))) for _ in range(n)]
        (folder / f"{split}.{SRC}").write_text("".join(s + "\n" for s in lines))
        (folder / f"{split}.{TGT}").write_text("".join(" ".join(reversed(s.split())) + "\n" for s in lines))
    return str(folder)


def preprocess_args(text: str, dest: Path, *extra: str) -> list[str]:
    return ["--source-lang", SRC, "--target-lang", TGT, "--trainpref", f"{text}/train", "--validpref",
            f"{text}/valid", "--testpref", f"{text}/test", "--destdir", str(dest), "--joined-dictionary", *extra]


def sharded(dest: Path, n: int = SHARDS) -> str:
    return ":".join(str(dest / f"shard{k}") for k in range(n))


# ---------------------------------------------------------------------------------------- nmt-preprocess


def test_preprocess_writes_shards_identically_with_one_or_two_workers(tmp_path, capsys):
    text = write_reverse_task(tmp_path / "text", n_train=31)
    outs = {}
    for workers in (1, 2):
        dest = tmp_path / f"bin{workers}"
        code, out, err = run_preprocess(preprocess_args(text, dest, "--num-shards", "3", "--keep-text",
                                                        "--workers", str(workers)), capsys)
        assert code == 0, err
        assert f"nmt-train {sharded(dest, 3)}" in out
        outs[workers] = {k: v for k, v in snapshot(dest).items() if k != "<siblings>"}
    assert outs[1] == outs[2]
    dest = tmp_path / "bin1"
    assert sorted(p.name for p in dest.iterdir()) == ["shard0", "shard1", "shard2"]
    train = (Path(text) / f"train.{SRC}").read_text().splitlines(keepends=True)
    for k in range(3):
        shard = dest / f"shard{k}"
        meta = json.loads((shard / "metadata.json").read_text())
        assert meta["shard"] == {"index": k, "of": 3}
        assert sorted(meta["splits"]) == (["test", "train", "valid"] if k == 0 else ["train"])
        assert (shard / "raw").is_dir() == (k == 0)  # valid/test (and their BLEU references) in shard0 only
        assert "".join(train[k::3]) == (shard / "text" / f"train.{SRC}").read_text()  # dealt round-robin
        assert meta["splits"]["train"][SRC]["sentences"] == len(train[k::3])
        for lang in (SRC, TGT):
            assert (shard / f"dict.{lang}.txt").read_bytes() == (dest / "shard0" / f"dict.{lang}.txt").read_bytes()

    code, out, _ = run_preprocess(preprocess_args(text, dest, "--num-shards", "3", "--keep-text"), capsys)
    assert code == 0 and "is up to date" in out
    before = snapshot(dest)
    code, _, err = run_preprocess(preprocess_args(text, dest, "--num-shards", "2"), capsys)
    assert code != 0 and "pass --overwrite" in err and snapshot(dest) == before
    code, out, err = run_preprocess(preprocess_args(text, dest, "--num-shards", "2", "--overwrite"), capsys)
    assert code == 0, err
    assert sorted(p.name for p in dest.iterdir()) == ["shard0", "shard1"]


def test_preprocess_refuses_more_shards_than_sentences(tmp_path, capsys):
    text = write_reverse_task(tmp_path / "text", n_train=3)
    code, _, err = run_preprocess(preprocess_args(text, tmp_path / "bin", "--num-shards", "4"), capsys)
    assert code != 0
    assert err.strip().splitlines()[-1].endswith("--num-shards 4: more shards than the 3 training sentences of "
                                                 f"{text}/train.{SRC}; use fewer shards")
    assert not (tmp_path / "bin").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["text"]  # no temp folder left either


# ---------------------------------------------------------------------------------------- nmt-train


@pytest.fixture(scope="module")
def shard_runs(tmp_path_factory):
    """Two shards; an uninterrupted run of MAX_UPDATE updates over three epochs (shard0, shard1, shard0)
    and a run killed early in epoch 1."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("shards")
    text = write_reverse_task(root / "text", n_train=80)
    with contextlib.redirect_stdout(io.StringIO()):
        from nmt.cli.preprocess import main

        with contextlib.suppress(SystemExit):
            main(preprocess_args(text, root / "bin", "--num-shards", str(SHARDS)))
    data = Path(sharded(root / "bin"))  # train_command takes a Path; the ':' joined string passes through
    run_train(in_process(train_command(data, root / "uninterrupted"), str(data)))
    killed = root / "killed"
    run_and_kill(train_command(data, killed), lambda: saved_updates(killed) >= 1)
    return root, data


def in_process(cmd: list[str], data: str) -> list[str]:
    """The arguments of a train_command, for nmt-train run in this process."""
    return cmd[cmd.index(data):]


def iterator_at(save_dir: Path, name: str) -> dict:
    training = load_checkpoint(save_dir / name)["training"]
    return {"epoch": training["epoch"], "num_updates": training["num_updates"], **training["iterator"]}


def same_logged_losses(expected: Path, got: Path, after_update: int) -> None:
    """Every per-update and validation figure the resumed run logged equals the uninterrupted run's."""
    def figures(save_dir: Path) -> dict:
        return {(r["kind"], r["num_updates"]): {k: r[k] for k in LOSSES} for r in read_log(save_dir)
                if r["kind"] in ("train_inner", "valid") and r["num_updates"] > after_update}
    want, have = figures(expected), figures(got)
    assert have and have == {key: want[key] for key in have}
    assert max(n for _, n in have) == MAX_UPDATE


def test_epochs_cycle_through_the_shards(shard_runs):
    root, _ = shard_runs
    run = root / "uninterrupted"
    ends = [iterator_at(run, f"checkpoint{e}.pt") for e in range(1, 4)]  # epoch ends
    assert [(s["epoch"], s["data_shard"], s["data_shards"]) for s in ends] == [(1, 0, 2), (2, 1, 2), (3, 0, 2)]
    assert all(s["end_of_epoch"] for s in ends)
    # epoch 3 re-reads shard 0: as many batches as epoch 1 (and shard 1's epoch has its own length)
    lengths = [s["offset"] for s in ends]
    assert lengths[2] == lengths[0] == ends[0]["num_updates"]
    assert lengths[1] == ends[1]["num_updates"] - ends[0]["num_updates"]
    assert {r["epoch"] for r in read_log(run, "valid")} >= {1, 2, 3}  # shard0's valid split (only there)


def test_killed_in_the_first_shard_and_resumed_with_the_same_command_matches(shard_runs, tmp_path):
    root, data = shard_runs
    save = tmp_path / "run"
    shutil.copytree(root / "killed", save)
    extra: tuple[str, ...] = ()
    last = iterator_at(save, "checkpoint_last.pt")
    if last["epoch"] != 1 or last["end_of_epoch"]:  # a late kill: resume from inside epoch 1 all the same
        extra = ("--restore-file", "checkpoint_1_1.pt")
        last = iterator_at(save, "checkpoint_1_1.pt")
    assert last["epoch"] == 1 and last["data_shard"] == 0 and not last["end_of_epoch"]
    run_train(in_process(train_command(data, save, *extra), str(data)))  # in this process: no second torch import
    expected = load_checkpoint(root / "uninterrupted" / "checkpoint_last.pt")
    assert_same_training(expected, load_checkpoint(save / "checkpoint_last.pt"), "resumed inside shard 0")
    same_logged_losses(root / "uninterrupted", save, last["num_updates"])


@pytest.mark.parametrize("where", ["boundary", "inside shard 1"])
def test_resumed_at_the_change_of_shard_or_inside_shard_1_matches(shard_runs, tmp_path, where, caplog):
    root, data = shard_runs
    first_len = iterator_at(root / "uninterrupted", "checkpoint1.pt")["num_updates"]
    name = "checkpoint1.pt" if where == "boundary" else f"checkpoint_2_{first_len + 2}.pt"
    save = tmp_path / "run"
    save.mkdir()
    shutil.copyfile(root / "uninterrupted" / name, save / name)
    start = iterator_at(save, name)
    assert start["end_of_epoch"] == (where == "boundary")
    assert (start["epoch"], start["data_shard"]) == ((1, 0) if where == "boundary" else (2, 1))
    caplog.set_level("INFO", logger="nmt")
    run_train(in_process(train_command(data, save, "--restore-file", name), str(data)))
    assert f"epoch 2: opened data shard 1 of 2 ({str(data).split(':')[1]}" in caplog.text
    expected = load_checkpoint(root / "uninterrupted" / "checkpoint_last.pt")
    assert_same_training(expected, load_checkpoint(save / "checkpoint_last.pt"), f"resumed {where}")
    same_logged_losses(root / "uninterrupted", save, start["num_updates"])


def test_resume_mid_epoch_with_other_shards_is_refused(shard_runs, tmp_path, capsys):
    root, data = shard_runs
    save = tmp_path / "run"
    save.mkdir()
    shutil.copyfile(root / "uninterrupted" / "checkpoint_1_2.pt", save / "checkpoint_last.pt")
    first = str(data).split(":")[0]
    code = call_train(in_process(train_command(Path(first), save), first))
    assert code == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "stopped inside epoch 1 reading data shard 0 of 2, but DATA now has 1" in line
    assert "--reset-dataloader" in line


def test_shards_with_other_dictionaries_are_refused(shard_runs, tmp_path, capsys):
    root, data = shard_runs
    text = write_reverse_task(tmp_path / "text", n_train=20, seed=5)
    code, _, err = run_preprocess(preprocess_args(text, tmp_path / "other", "--nwordssrc", "9"), capsys)
    assert code == 0, err
    first = str(data).split(":")[0]
    data = f"{first}:{tmp_path / 'other'}"
    code = call_train(in_process(train_command(Path(data), tmp_path / "ck"), data))
    assert code != 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"shard 1 ({tmp_path / 'other'}): dict.{SRC}.txt differs from {first}'s" in line
    assert "--srcdict" in line and "--num-shards" in line
    assert not (tmp_path / "ck" / "checkpoint_last.pt").exists()


def refused_before_training(data: str, save_dir: Path, capsys) -> tuple[int, str]:
    """nmt-train on ``data`` with --max-update 1 (it never reaches epoch 2): (exit code, its last stderr line);
    nothing trained, nothing written."""
    code = call_train(in_process(train_command(Path(data), save_dir, "--max-update", "1"), data))
    err = capsys.readouterr().err
    assert "Traceback" not in err and "num_updates" not in err, err
    assert not save_dir.exists()
    return code, err.strip().splitlines()[-1]


def test_a_shard_of_another_language_pair_is_refused_before_training(shard_runs, tmp_path, capsys):
    """Shard 1 binarized the other way round (same dictionaries, so their check passes): refused before update 1,
    not when epoch 2 opens it (with a short --max-update, never); without its metadata.json, by its missing split."""
    _, data = shard_runs
    first = str(data).split(":")[0]
    text = write_reverse_task(tmp_path / "text", n_train=20, seed=5)
    other = tmp_path / "reversed"
    code, _, err = run_preprocess(["--source-lang", TGT, "--target-lang", SRC, "--trainpref", f"{text}/train",
                                   "--destdir", str(other), "--srcdict", f"{first}/dict.{TGT}.txt",
                                   "--tgtdict", f"{first}/dict.{SRC}.txt"], capsys)
    assert code == 0, err
    fix = (f"binarize every shard with --source-lang {SRC} --target-lang {TGT} and the first shard's dictionaries "
           f"(nmt-preprocess --srcdict {first}/dict.{SRC}.txt --tgtdict {first}/dict.{TGT}.txt), or write them "
           "together with nmt-preprocess --num-shards N")
    shards = f"{first}:{other}"
    code, line = refused_before_training(shards, tmp_path / "ck", capsys)
    assert code == 2
    assert line == (f"nmt-train: error: shard 1 ({other}): a data-bin of {TGT}-{SRC} (its metadata.json), but the "
                    f"first shard {first} is one of {SRC}-{TGT}; {fix}")
    (other / "metadata.json").unlink()
    code, line = refused_before_training(shards, tmp_path / "ck", capsys)
    assert code == 2
    assert line == (f"nmt-train: error: shard 1 ({other}): no 'train' split of {SRC}-{TGT} "
                    f"({other}/train.{SRC}-{TGT}.{SRC}.bin/.idx missing) like {first}'s; {fix}")


def test_a_truncated_shard_is_refused_before_training(shard_runs, tmp_path, capsys):
    _, data = shard_runs
    first, second = str(data).split(":")
    copy = tmp_path / "shard1"
    shutil.copytree(second, copy)
    binary = copy / f"train.{SRC}-{TGT}.{TGT}.bin"
    binary.write_bytes(binary.read_bytes()[:-3])
    code, line = refused_before_training(f"{first}:{copy}", tmp_path / "ck", capsys)
    assert code == 1
    assert line == (f"nmt-train: error: {copy}/train.{SRC}-{TGT}.{TGT}: .idx/.bin sizes do not match "
                    "(truncated copy?); re-run nmt-preprocess")


# ---------------------------------------------------------------------------------------- the other commands


def test_validate_generate_and_export_read_the_first_shard(shard_runs, tmp_path, capsys):
    from nmt.cli.export import main as export_main
    from nmt.cli.generate import main as generate_main
    from nmt.cli.validate import main as validate_main

    root, data = shard_runs
    first = str(data).split(":")[0]
    ckpt = str(root / "uninterrupted" / "checkpoint_last.pt")

    def run(main, argv: list[str]) -> str:
        try:
            main(argv)
        except SystemExit as e:
            assert not e.code, capsys.readouterr().err
        lines = capsys.readouterr().out.splitlines()  # all but the speed figures
        return "\n".join(re.sub(r"wps [0-9.]+", "wps", ln) for ln in lines if re.match(r"[STHDP]-\d|valid on|Gen", ln))

    for main, extra in ((validate_main, ["--threads", "1"]), (generate_main, ["--gen-subset", "test", "--beam", "2"])):
        plain, whole = (run(main, [d, "--path", ckpt, *extra]) for d in (first, str(data)))
        assert plain.strip() and plain == whole
    run(export_main, [str(data), "--path", ckpt, "--output", str(tmp_path / "model")])
    assert (tmp_path / "model" / f"dict.{SRC}.txt").read_bytes() == (Path(first) / f"dict.{SRC}.txt").read_bytes()
    # the card names the data it was trained on: every shard's training pairs (80), not the first's (40)
    manifest = json.loads((tmp_path / "model" / "model.json").read_text())
    assert manifest["training"]["data"] == "bin (2 shards)" and manifest["training"]["sentences"] == 80
    assert "data-bin bin (2 shards), 80 sentence pairs" in (tmp_path / "model" / "README.md").read_text()
    import nmt

    model = nmt.load(ckpt, str(data), threads=1)
    assert model.data.path == Path(first)
    assert model.translate(["a b c"]) == nmt.load(ckpt, first, threads=1).translate(["a b c"])


def test_a_bad_shard_list_is_one_line(shard_runs, tmp_path, capsys):
    from nmt.cli.generate import main as generate_main

    root, data = shard_runs
    first = str(data).split(":")[0]
    bad = f"{first}::{first}"
    assert call_train(in_process(train_command(Path(bad), tmp_path / "ck"), bad)) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        f"DATA {bad}: an empty shard path; join the data-bin folders with single ':', "
        "e.g. data-bin/shard0:data-bin/shard1")
    with pytest.raises(SystemExit) as exit_:
        generate_main([f"{first}:{tmp_path / 'nowhere'}", "--path", str(root / "uninterrupted" / "checkpoint1.pt")])
    assert exit_.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"shard 1 ({tmp_path / 'nowhere'}) is no folder" in line


class _Shard:
    """A stand-in dataset: item i of shard k is (k, i)."""

    def __init__(self, k: int):
        self.k = k

    def __getitem__(self, i: int) -> tuple[int, int]:
        return self.k, i

    def collater(self, items: list) -> list:
        return items


def test_shard_epoch_iterator_state():
    import numpy as np

    from nmt.data.epoch_iterator import EpochBatchIterator
    from nmt.data.shard_epochs import ShardEpochIterator
    from nmt.errors import DataError

    opened: list[int] = []

    def open_shard(k: int, epoch: int) -> EpochBatchIterator:
        opened.append(k)
        return EpochBatchIterator(_Shard(k), [np.array([i]) for i in range(k + 2)], epoch=epoch)

    def shards(n: int) -> ShardEpochIterator:
        opened.clear()
        return ShardEpochIterator(n, open_shard)

    itr = shards(3)
    seen = [{k for [(k, _)] in itr.next_epoch_itr()} for _ in range(4)]
    assert seen == [{0}, {1}, {2}, {0}] and opened == [0, 1, 2, 0]  # one shard open at a time, in epoch order
    assert itr.state_dict() == {"epoch": 4, "offset": 2, "data_shard": 0, "data_shards": 3, "end_of_epoch": True}

    itr = shards(3)
    batches = itr.next_epoch_itr()
    next(batches)
    mid = itr.state_dict()  # epoch 1, one batch of shard 0 done
    resumed = shards(3)
    resumed.load_state_dict(mid)
    assert [k for [(k, _)] in resumed.next_epoch_itr()] == [0] and resumed.end_of_epoch()
    with pytest.raises(DataError, match="reading data shard 0 of 3, but DATA now has 2"):
        shards(2).load_state_dict(mid)

    done = {**mid, "offset": 2, "end_of_epoch": True}
    other = shards(2)
    other.load_state_dict(done)  # an epoch end: the next epoch starts on the new list of shards
    assert other.end_of_epoch() and {k for [(k, _)] in other.next_epoch_itr()} == {1}

    old = shards(1)
    old.load_state_dict({"epoch": 2, "offset": 1})  # a checkpoint written before sharded data
    assert (old.epoch, old.offset, old.data_shard) == (2, 1, 0)


def test_eval_bleu_on_sharded_data_scores_the_first_shards_valid_split(shard_runs, tmp_path):
    _, data = shard_runs
    save_dir = tmp_path / "bleu"
    cmd = in_process(train_command(data, save_dir, "--eval-bleu", "--eval-bleu-args", '{"beam": 2}',
                                   "--max-update", "3"), str(data))
    run_train(cmd)
    scored = [r for r in read_log(save_dir, "valid") if "bleu" in r]
    assert scored and all(0 <= r["bleu"] <= 100 and 0 <= r["chrf"] <= 100 for r in scored)
