"""nmt-generate through its real CLI (in this process) on a tiny data-bin and random tiny models."""

from __future__ import annotations

import re

import pytest
import torch

from nmt.cli.generate import main as generate_main
from test_generate_setup import call_cli, make_checkpoint, make_data_bin

torch.set_num_threads(1)
N_TEST = 9


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gen")
    data_bin = make_data_bin(folder, n_test=N_TEST)
    return folder, data_bin, make_checkpoint(data_bin, folder / "a.pt", seed=0), \
        make_checkpoint(data_bin, folder / "b.pt", seed=1)


def generate(capsys, *argv) -> tuple[int, str, str]:
    code = call_cli(generate_main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def lines_of(out: str, kind: str) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for line in out.splitlines():
        m = re.match(rf"{kind}-(\d+)\t(.*)", line)
        if m:
            found.setdefault(int(m.group(1)), []).append(m.group(2))
    return found


def test_output_format_bleu_and_speed(setup, capsys):
    folder, data_bin, a, _ = setup
    code, out, err = generate(capsys, data_bin, "--path", a, "--beam", "3", "--nbest", "2", "--max-len-b", "6")
    assert code == 0, err
    for kind in "STHDP":
        assert sorted(lines_of(out, kind)) == list(range(N_TEST)), kind
    hyps, pos = lines_of(out, "H"), lines_of(out, "P")
    for sid in range(N_TEST):
        assert len(hyps[sid]) == 2 and len(pos[sid]) == 2
        scores = [float(h.split("\t")[0]) for h in hyps[sid]]
        assert scores == sorted(scores, reverse=True)
        for h, p in zip(hyps[sid], pos[sid]):
            tokens = h.split("\t")[1].split()
            assert len(p.split()) == len(tokens) + 1  # one score per token, plus the eos
            assert len(tokens) <= 6
    assert re.search(r"Generate test with beam=3: BLEU = \d+\.\d+", out)
    assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in out
    assert f"against {data_bin / 'raw' / 'test.de'})" in out  # the raw reference kept by nmt-preprocess
    assert re.search(r"[\d.]+ sentences/s, [\d.]+ tokens/s", out)


def test_detokenized_output_and_reference_file(setup, capsys):
    folder, data_bin, a, _ = setup
    code, out, err = generate(capsys, data_bin, "--path", a, "--beam", "2", "--max-len-b", "5",
                              "--results-path", folder / "res", "--reference", folder / "test.de")
    assert code == 0, err
    text = (folder / "res" / "generate-test.txt").read_text()
    assert "beam: 2" in (folder / "res" / "generate-test.config.yaml").read_text()
    h, d = lines_of(text, "H"), lines_of(text, "D")
    assert sorted(d) == list(range(N_TEST))
    for sid in h:
        (h_score, _), (d_score, d_text) = h[sid][0].split("\t"), d[sid][0].split("\t")
        assert h_score == d_score and "@@" not in d_text
    assert "against --reference" in text and "BLEU" in err


def test_ensemble_of_a_checkpoint_with_itself_equals_it(setup, capsys):
    folder, data_bin, a, _ = setup
    common = ["--beam", "3", "--max-len-b", "6", "--batch-size", "4"]
    _, single, _ = generate(capsys, data_bin, "--path", a, *common)
    _, double, _ = generate(capsys, data_bin, "--path", f"{a}:{a}", *common)
    s, d = lines_of(single, "H"), lines_of(double, "H")
    assert {k: [h.split("\t")[1] for h in v] for k, v in s.items()} == \
           {k: [h.split("\t")[1] for h in v] for k, v in d.items()}
    for k in s:
        assert float(s[k][0].split("\t")[0]) == pytest.approx(float(d[k][0].split("\t")[0]), abs=2e-4)


def test_batch_size_does_not_change_the_output(setup, capsys):
    folder, data_bin, _, b = setup
    outs = []
    for size in ("1", "9"):
        _, out, _ = generate(capsys, data_bin, "--path", b, "--beam", "4", "--max-len-b", "6", "--batch-size", size)
        outs.append({k: [h.split("\t")[1] for h in v] for k, v in lines_of(out, "H").items()})
    assert outs[0] == outs[1]


def test_print_alignment(setup, capsys):
    folder, data_bin, a, _ = setup
    code, out, err = generate(capsys, data_bin, "--path", a, "--beam", "2", "--max-len-b", "4", "--print-alignment")
    assert code == 0, err
    alignments, hyps, sources = lines_of(out, "A"), lines_of(out, "H"), lines_of(out, "S")
    assert sorted(alignments) == list(range(N_TEST))
    for sid, (line,) in alignments.items():
        pairs = [tuple(map(int, p.split("-"))) for p in line.split()]
        assert [t for _, t in pairs] == list(range(len(hyps[sid][0].split("\t")[1].split())))
        assert all(0 <= s < len(sources[sid][0].split()) for s, _ in pairs)


def test_attention_plot(setup, capsys, tmp_path):
    folder, data_bin, a, _ = setup
    code, out, err = generate(capsys, data_bin, "--path", a, "--beam", "2", "--max-len-b", "4",
                              "--attention-plot", tmp_path / "plots", "--attention-plot-sentences", "2", "--quiet")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert code == 2 and "needs matplotlib" in err
        return
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        f"sent{s}_layer1_head{h}.png" for s in range(2) for h in range(2)]


def test_the_attention_plot_starts_from_the_models_decoder_start(setup, capsys, tmp_path, monkeypatch):
    """A model whose decoder starts from </s> (fairseq-imported) is plotted from </s>, as it searched: a plot
    forced from <s> would show attention the model never computed."""
    from nmt.generation import attention_plot

    pytest.importorskip("matplotlib")
    folder, data_bin, _, _ = setup
    ckpt = make_checkpoint(data_bin, tmp_path / "eos.pt", decoder_start="</s>")
    firsts = []
    real = attention_plot.teacher_forced_attention

    def recording(model, src, tokens, first):
        firsts.append(first)
        return real(model, src, tokens, first)

    monkeypatch.setattr(attention_plot, "teacher_forced_attention", recording)
    code, _, err = generate(capsys, data_bin, "--path", ckpt, "--beam", "1", "--max-len-b", "3",
                            "--attention-plot", tmp_path / "plots", "--attention-plot-sentences", "1", "--quiet")
    assert code == 0, err
    assert firsts == [2]  # </s> in every nmt dictionary (<s> is 0)


def test_errors_are_one_line(setup, capsys):
    folder, data_bin, a, _ = setup
    code, _, err = generate(capsys, data_bin, "--path", folder / "missing.pt")
    assert code == 1 and "missing.pt" in err and "Traceback" not in err
    code, _, err = generate(capsys, data_bin)
    assert code == 2 and "--path is required" in err
    code, _, err = generate(capsys, data_bin, "--path", a, "--beam", "2", "--nbest", "3")
    assert code == 2 and "--nbest 3" in err


def test_skipping_the_encoder_side_cache_reorder_changes_nothing(setup):
    """Beam search keeps one cross-attention cache row per sentence, shared by its beams, and leaves
    it alone while no sentence leaves the batch; the result must equal giving every beam its own
    copy and reordering every cache entry at every step."""
    from nmt.config.generate import GenerationConfig
    from nmt.data.data_bin import open_data_dir
    from nmt.data.language_pair_dataset import load_language_pair
    from nmt.generation.loading import load_ensemble
    from nmt.generation.search import build_search

    folder, data_bin, a, _ = setup
    data = open_data_dir(str(data_bin), None, None)
    ds = load_language_pair(str(data_bin), "test", data.src, data.tgt)
    batch = ds.collater([ds[i] for i in range(len(ds))])["net_input"]
    search = build_search(GenerationConfig(beam=4, nbest=4, max_len_b=7), data.tgt_dict)
    fast = load_ensemble(str(a), data.src_dict, data.tgt_dict)
    slow = load_ensemble(str(a), data.src_dict, data.tgt_dict)
    assert fast.can_share_encoder
    kept = []  # per reorder of the fast search: whether it left the (present) cross-attention entries alone
    fast_reorder, slow_reorder = fast.reorder_states, slow.reorder_states

    def recording(states, order, **kwargs):
        kept.append(bool(kwargs.get("keep_encoder")) and all(s.cross_attn for s in states))
        return fast_reorder(states, order, **kwargs)

    fast.reorder_states = recording
    # every entry of the slow one's caches, the cross-attention ones too, follows the beams' parents
    slow.reorder_states = lambda states, order, drop_left=0, **_: slow_reorder(states, order, drop_left=drop_left)
    slow.can_share_encoder = False
    for hf, hs in zip(search.search(fast, batch["src_tokens"], batch["src_lengths"]),
                      search.search(slow, batch["src_tokens"], batch["src_lengths"])):
        assert [h.tokens.tolist() for h in hf] == [h.tokens.tolist() for h in hs]
        assert [h.score for h in hf] == pytest.approx([h.score for h in hs], abs=1e-5)
    assert any(kept)  # the real model's cross-attention entries were found and left alone


def test_bf16_runs(setup, capsys):
    folder, data_bin, a, _ = setup
    code, out, err = generate(capsys, data_bin, "--path", a, "--beam", "2", "--max-len-b", "4", "--bf16")
    assert code == 0, err
    assert sorted(lines_of(out, "H")) == list(range(N_TEST))


def test_scores_equal_the_models_teacher_forced_log_probs(setup):
    """Each hypothesis' positional scores are the log-probs a full (uncached) forward pass gives
    its tokens, and its score is their sum / length (lenpen 1)."""
    from nmt.config.generate import GenerationConfig
    from nmt.data.data_bin import open_data_dir
    from nmt.data.language_pair_dataset import load_language_pair
    from nmt.generation.loading import load_ensemble
    from nmt.generation.search import build_search

    folder, data_bin, a, _ = setup
    data = open_data_dir(str(data_bin), None, None)
    ds = load_language_pair(str(data_bin), "test", data.src, data.tgt)
    ens = load_ensemble(str(a), data.src_dict, data.tgt_dict)
    model = ens.models[0]
    batch = ds.collater([ds[i] for i in range(4)])["net_input"]
    results = build_search(GenerationConfig(beam=3, nbest=3, max_len_b=6), data.tgt_dict).search(
        ens, batch["src_tokens"], batch["src_lengths"])
    for row, hyps in enumerate(results):
        length = int(batch["src_lengths"][row])
        src = batch["src_tokens"][row: row + 1, :length]
        for h in hyps:
            prev = torch.cat([torch.tensor([data.tgt_dict.bos()]), h.tokens[:-1]]).unsqueeze(0)
            with torch.no_grad():
                lprobs = torch.log_softmax(model(src, torch.tensor([length]), prev).float(), -1)[0]
            expected = lprobs.gather(1, h.tokens.unsqueeze(1)).squeeze(1)
            assert torch.allclose(h.positional_scores, expected, atol=1e-4)
            assert h.score == pytest.approx(expected.sum().item() / len(h.tokens), abs=1e-4)
