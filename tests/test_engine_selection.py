"""--engine torch|onnxruntime|compiled|ctranslate2|auto on nmt-generate, nmt-interactive, nmt-serve and
nmt.load(dir, engine=...) (issue 60, item 3): the ctranslate2 engine gives nmt's hypotheses (the translations
CTranslate2 finds over the same folder, with nmt's scores); every engine's error is one line through the real
commands; auto takes the first engine of its order that loads and says which.

onnxruntime and compiled are stand-ins here (tests/engine_stubs.py: their "step" is the folder's torch model),
so that the selection and nmt's searches over an engine's members are tested apart from those engines."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import nmt
from engine_stubs import register_exports, register_runtimes
from model_folder_setup import export
from nmt.cli.generate import main as generate_main
from nmt.cli.interactive import main as interactive_main
from nmt.errors import UsageError
from reliability_helpers import fails_cleanly
from test_generate_setup import call_cli
from test_model_folder import copy_folder

ctranslate2 = pytest.importorskip("ctranslate2")

SENTENCES = ["the cat sat on the mat.", "a big red dog ran!", "the small tree, ok.", "house"]


@pytest.fixture(scope="module")
def ct2_folder(exported_model, tmp_path_factory) -> Path:
    """The exported model folder with its ctranslate2/ (nmt-export --path MODEL_DIR --with ctranslate2)."""
    folder = copy_folder(exported_model.folder, tmp_path_factory.mktemp("engines") / "model")
    assert export("--path", folder, "--with", "ctranslate2") == 0
    return folder


def generate(capsys, *argv) -> tuple[str, str]:
    capsys.readouterr()
    assert call_cli(generate_main, [str(a) for a in argv]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def lines(out: str, kind: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(2) for m in re.finditer(rf"^{kind}-(\d+)\t(.*)$", out, re.M)}


def test_the_engine_option_offers_every_engine_and_auto():
    """--engine's choices (nmt.config, which cannot import nmt.engines) are the engines' names."""
    import dataclasses

    from nmt.config.generate import InferenceConfig
    from nmt.engines import AUTO, AUTO_ORDER, ENGINE_NAMES, EXPORTS

    field = next(f for f in dataclasses.fields(InferenceConfig) if f.name == "engine")
    assert set(field.metadata["choices"]) == {AUTO, *ENGINE_NAMES} and field.default == AUTO
    assert set(AUTO_ORDER) == set(ENGINE_NAMES) and AUTO_ORDER[-1] == "torch"
    assert set(EXPORTS.values()) == set(ENGINE_NAMES) - {"torch"}


# --------------------------------------------------------------------------- the ctranslate2 engine


def test_ctranslate2_engine_finds_what_ctranslate2_finds_over_the_folder_and_nmt_scores_it(exported_model, ct2_folder,
                                                                                          capsys):
    """nmt-generate --engine ctranslate2 --beam 1: CTranslate2's own translations of the split (the way
    today's --format ctranslate2 export is checked), which are the torch engine's, with its scores."""
    m = exported_model
    ours, err = generate(capsys, m.data, "--path", ct2_folder, "--engine", "ctranslate2", "--beam", "1",
                         "--threads", "1")
    assert "engine:" not in err  # asked for by name: nothing to announce
    torch_out, _ = generate(capsys, m.data, "--path", ct2_folder, "--engine", "torch", "--beam", "1", "--threads", "1")
    sources = lines(ours, "S")
    ids = sorted(sources)
    hyps = {k: v.split("\t", 1)[1] for k, v in lines(ours, "H").items()}
    translator = ctranslate2.Translator(str(ct2_folder / "ctranslate2"), device="cpu", intra_threads=1)
    from nmt.interop.ctranslate2_export import suppressed_symbols

    found = translator.translate_batch([sources[i].split() + ["</s>"] for i in ids], beam_size=1,
                                       max_decoding_length=200, suppress_sequences=suppressed_symbols("<s>"))
    assert [hyps[i] for i in ids] == [" ".join(r.hypotheses[0]) for r in found]
    assert _close(lines(ours, "H"), lines(torch_out, "H"))
    assert _close(lines(ours, "P"), lines(torch_out, "P"))
    assert lines(ours, "D") == lines(torch_out, "D")
    bleu = [ln for ln in ours.splitlines() if ln.startswith("Generate test with beam=1: BLEU")]
    assert bleu and bleu == [ln for ln in torch_out.splitlines() if ln.startswith("Generate test with beam=1: BLEU")]


def _close(ours: dict[int, str], theirs: dict[int, str], tol: float = 2e-3) -> bool:
    """The same tokens, and numbers (scores, positional scores) within ``tol``."""
    if ours.keys() != theirs.keys():
        return False
    for k in ours:
        a, b = ours[k].split(), theirs[k].split()
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            try:
                if abs(float(x) - float(y)) > tol:
                    return False
            except ValueError:
                if x != y:
                    return False
    return True


def test_nmt_load_with_the_ctranslate2_engine_translates_as_torch_does(ct2_folder):
    theirs = nmt.load(ct2_folder, engine="torch", threads=1)
    ours = nmt.load(ct2_folder, engine="ctranslate2", threads=1)
    assert ours.engine.name == "ctranslate2" and ours.parameters == theirs.parameters
    assert ours.translate(SENTENCES, beam=1) == theirs.translate(SENTENCES, beam=1)
    assert ours.translate(SENTENCES[0]) == theirs.translate(SENTENCES[0])  # beam 5
    mine = ours.translate_detailed(SENTENCES, beam=4, nbest=2, alignment=True, attention=True)
    reference = theirs.translate_detailed(SENTENCES, beam=4, nbest=2, alignment=True, attention=True)
    for a, b in zip(mine, reference):
        assert [h.tokens for h in a.hypotheses] == [h.tokens for h in b.hypotheses]
        for x, y in zip(a.hypotheses, b.hypotheses):
            assert x.score == pytest.approx(y.score, abs=1e-4)
            assert x.positional_scores == pytest.approx(y.positional_scores, abs=1e-4)
            assert x.alignment == y.alignment  # from the torch model of the folder
        assert a.attention is not None and a.attention.shape == b.attention.shape


def test_ctranslate2_engine_keeps_nmts_length_limits_and_rules(ct2_folder):
    """--max-len-a/-b per sentence, --min-len and --no-repeat-ngram-size, as nmt's searches apply them."""
    ours = nmt.load(ct2_folder, engine="ctranslate2", threads=1)
    theirs = nmt.load(ct2_folder, engine="torch", threads=1)
    for options in ({"max_len_a": 0.5, "max_len_b": 1}, {"max_len_b": 2}, {"min_len": 6, "max_len_b": 9},
                    {"no_repeat_ngram_size": 1}, {"no_repeat_ngram_size": 2, "beam": 3}):
        options = {"beam": 1, **options}
        a = ours.translate_detailed(SENTENCES, **options)
        b = theirs.translate_detailed(SENTENCES, **options)
        assert [t.hypotheses[0].tokens for t in a] == [t.hypotheses[0].tokens for t in b], options


@pytest.mark.parametrize("options, needle", [
    ({"unkpen": 1.0}, "--unkpen 1: the ctranslate2 engine has no unknown-word penalty"),
    ({"search": {"name": "sampling"}}, "--search sampling: the ctranslate2 engine runs beam search"),
])
def test_what_ctranslate2_cannot_honour_is_one_line_naming_it(ct2_folder, options, needle):
    model = nmt.load(ct2_folder, engine="ctranslate2", threads=1)
    with pytest.raises(UsageError) as info:
        model.translate(SENTENCES, **options)
    assert needle in str(info.value) and "--engine torch" in str(info.value) and "\n" not in str(info.value)
    assert model.translate(SENTENCES[:1], beam=1)  # still translating


# --------------------------------------------------------------------------- one-line errors through the commands


def test_an_engine_with_a_checkpoint_or_an_ensemble_is_refused(exported_model, tmp_path, capsys):
    m = exported_model
    fails_cleanly(generate_main, "nmt-generate", [m.data, "--path", m.pair[-1], "--engine", "onnxruntime"], 2,
                  ("is a checkpoint, which only the torch engine runs",
                   f"nmt-export DATA --path {m.pair[-1]} --output DIR --with onnx"), [tmp_path], capsys)
    fails_cleanly(generate_main, "nmt-generate", [m.data, "--path", f"{m.folder}:{m.averaged}", "--engine",
                                                  "ctranslate2"], 2, ("is an ensemble",), [tmp_path], capsys)


@pytest.mark.parametrize("engine, flag", [("onnxruntime", "onnx"), ("compiled", "compiled"),
                                          ("ctranslate2", "ctranslate2")])
def test_a_folder_without_the_engines_files_names_the_export_flag(exported_model, capsys, engine, flag):
    m = exported_model
    needle = f"holds no {flag}/ (its engine files); add them with nmt-export --path {m.folder} --with {flag}"
    fails_cleanly(generate_main, "nmt-generate", [m.data, "--path", m.folder, "--engine", engine], 2, (needle,),
                  [m.folder], capsys)
    fails_cleanly(interactive_main, "nmt-interactive", [m.folder, "--engine", engine], 2, (needle,), [m.folder],
                  capsys)


def test_nmt_serve_refuses_a_missing_engine_in_one_line(exported_model, capsys):
    from nmt.cli.serve import main as serve_main

    m = exported_model
    fails_cleanly(serve_main, "nmt-serve", [m.folder, "--engine", "compiled", "--port", "0"], 2,
                  ("holds no compiled/", "--with compiled"), [m.folder], capsys)


def test_options_an_engine_cannot_honour_are_refused(ct2_folder, exported_model, capsys):
    m = exported_model
    for argv, needle in (
        (["--engine", "ctranslate2", "--compile"], "--compile: an option of the torch engine"),
        (["--engine", "ctranslate2", "--workers", "2"], "--workers 2: worker processes run the torch engine"),
        (["--engine", "ctranslate2", "--unkpen", "2"], "--unkpen 2: the ctranslate2 engine"),
        (["--engine", "ctranslate2", "--search", "sampling"], "--search sampling"),
    ):
        fails_cleanly(generate_main, "nmt-generate", [m.data, "--path", ct2_folder, *argv], 2, (needle,),
                      [ct2_folder], capsys)


def test_a_changed_engine_file_is_refused_naming_it(ct2_folder, tmp_path, capsys):
    folder = copy_folder(ct2_folder, tmp_path / "model")
    with open(folder / "ctranslate2" / "model.bin", "r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    fails_cleanly(interactive_main, "nmt-interactive", [folder, "--engine", "ctranslate2"], 1,
                  ("model.bin: its content does not match the sha256", f"--path {folder} --with ctranslate2 --force"),
                  [folder], capsys)
    capsys.readouterr()
    assert nmt.load(folder, threads=1).engine.name == "torch"  # auto: the next engine that loads, saying why
    assert re.fullmatch(r"engine: torch \(auto\); ctranslate2 not loaded: \S+model.bin: its content does not match "
                        r"the sha256 .* --with ctranslate2 --force\n", capsys.readouterr().err)
    shutil.rmtree(folder / "ctranslate2")
    fails_cleanly(interactive_main, "nmt-interactive", [folder, "--engine", "ctranslate2"], 1,
                  ("config.json: missing; the ctranslate2 export is incomplete",), [folder], capsys)


# --------------------------------------------------------------------------- auto


def with_stub_engines(monkeypatch, exported_model, tmp_path, names: str) -> Path:
    register_exports(monkeypatch)
    folder = copy_folder(exported_model.folder, tmp_path / "model")
    assert export("--path", folder, "--with", names) == 0
    return folder


def test_auto_takes_the_first_engine_of_its_order_and_says_which(exported_model, tmp_path, monkeypatch, capsys):
    folder = with_stub_engines(monkeypatch, exported_model, tmp_path, "ctranslate2,onnx,compiled")
    loads = register_runtimes(monkeypatch)
    model = nmt.load(folder, threads=1)
    assert model.engine.name == "compiled" and capsys.readouterr().err == "engine: compiled (auto)\n"
    assert loads.calls == [("compiled", folder / "compiled")]
    torch_model = nmt.load(folder, engine="torch", threads=1)
    assert capsys.readouterr().err == ""  # asked for by name
    # nmt's own searches over the engine's member: the stand-in's member is the torch model, so the same output
    for options in ({"beam": 1}, {"beam": 4, "nbest": 2}, {"search": {"name": "sampling"}, "beam": 2}):
        assert model.translate(SENTENCES, **options) == torch_model.translate(SENTENCES, **options)
    mine = model.translate_detailed(SENTENCES, alignment=True, attention=True)
    theirs = torch_model.translate_detailed(SENTENCES, alignment=True, attention=True)
    assert [h.alignment for t in mine for h in t.hypotheses] == [h.alignment for t in theirs for h in t.hypotheses]


def test_auto_passes_over_an_engine_that_does_not_load_and_says_why(exported_model, tmp_path, monkeypatch, capsys):
    folder = with_stub_engines(monkeypatch, exported_model, tmp_path, "compiled,onnx")
    register_runtimes(monkeypatch, compiled_error="compiled/: built for another CPU; export it again here")
    model = nmt.load(folder, threads=1)
    err = capsys.readouterr().err
    assert model.engine.name == "onnxruntime"
    assert err == "engine: onnxruntime (auto); compiled not loaded: compiled/: built for another CPU; export it " \
                  "again here\n"


def test_quantize_int8_runs_the_onnx_int8_graphs_where_auto_passes_over_compiled(exported_model, tmp_path,
                                                                                  monkeypatch, capsys):
    folder = with_stub_engines(monkeypatch, exported_model, tmp_path, "compiled,onnx")
    loads = register_runtimes(monkeypatch)
    model = nmt.load(folder, threads=1, quantize="int8")
    assert model.engine.name == "onnxruntime"
    assert capsys.readouterr().err == "engine: onnxruntime (auto); compiled cannot honour --quantize\n"
    nmt.load(folder, engine="onnxruntime", threads=1, quantize="int8")
    assert loads.calls == [("onnxruntime int8", folder / "onnx")] * 2
    with pytest.raises(UsageError, match="--quantize fp16: an option of the torch engine"):
        nmt.load(folder, engine="onnxruntime", threads=1, quantize="fp16")


def test_auto_runs_torch_for_checkpoints_old_folders_and_torch_options(exported_model, ct2_folder, capsys):
    m = exported_model
    out, err = generate(capsys, m.data, "--path", m.pair[-1], "--beam", "1", "--threads", "1", "--quiet")
    assert "engine:" not in err
    out, err = generate(capsys, m.data, "--path", m.folder, "--beam", "1", "--threads", "1", "--quiet")
    assert "engine:" not in err  # a folder without engine files: torch, nothing to choose
    out, err = generate(capsys, m.data, "--path", ct2_folder, "--beam", "1", "--threads", "1", "--quiet")
    assert "engine: ctranslate2 (auto)" in err
    out, err = generate(capsys, m.data, "--path", ct2_folder, "--beam", "1", "--threads", "1", "--quiet",
                        "--quantize", "int8")
    assert "engine: ctranslate2 (auto)" in err  # CTranslate2 honours --quantize int8 (its int8 compute type)
    out, err = generate(capsys, m.data, "--path", ct2_folder, "--beam", "1", "--threads", "1", "--quiet",
                        "--quantize", "fp16")
    assert "engine: torch (auto); ctranslate2 not loaded: --quantize fp16" in err
    out, err = generate(capsys, m.data, "--path", ct2_folder, "--beam", "1", "--threads", "1", "--quiet",
                        "--unkpen", "1")
    assert "engine: torch (auto); ctranslate2 not loaded: --unkpen 1: the ctranslate2 engine" in err


def test_the_server_reports_its_engine(ct2_folder):
    """What /models says comes from the loaded model (nmt.serve.app.TranslationService.model_info)."""
    from nmt.config.serve import ServeJob
    from nmt.serve.app import TranslationService

    model = nmt.load(ct2_folder, engine="ctranslate2", threads=1)
    info = TranslationService(model, None, ServeJob()).model_info()  # type: ignore[arg-type]
    assert info["engine"] == "ctranslate2" and info["parameters"] == json.loads(
        (ct2_folder / "model.json").read_text())["parameters"]


@pytest.mark.slow
def test_nmt_serve_translates_with_the_engine_auto_takes(ct2_folder):
    """The real server on a folder with ctranslate2/: auto takes it, requests (many at once, with alignments and the
    page's attention) are answered as the torch engine translates."""
    from concurrent.futures import ThreadPoolExecutor

    from served_model import Server, http

    theirs = nmt.load(ct2_folder, engine="torch", threads=1)
    server = Server([str(ct2_folder), "--threads", "1", "--beam", "1"])
    try:
        status, models, _ = http(server.base + "/models", timeout=30)
        assert status == 200 and models[0]["engine"] == "ctranslate2"

        def ask(k: int) -> dict:
            status, answer, _ = http(server.base + "/v1/translate", {"text": SENTENCES[k:] + SENTENCES[:k],
                                                                     "alignment": True, "attention": k == 0})
            assert status == 200, answer
            return answer

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(ask, range(4)))
        for k, answer in enumerate(answers):
            expected = theirs.translate_detailed(SENTENCES[k:] + SENTENCES[:k], beam=1, alignment=True)
            got = [t["hypotheses"][0] for t in answer["translations"]]
            assert [h["text"] for h in got] == [t.text for t in expected]
            assert [[list(p) for p in h["alignment"]] for h in got] == \
                [[list(p) for p in t.hypotheses[0].alignment] for t in expected]
        assert answers[0]["translations"][0]["attention"]["weights"]
    finally:
        assert server.stop() == 0


def test_nmt_interactive_with_each_engine_prints_what_torch_prints(ct2_folder, tmp_path, monkeypatch, capsys):
    """Plain and --verbose (its P- lines: per-token log-probabilities of CTranslate2's outputs, as nmt computes them);
    the stand-in onnxruntime engine runs nmt's own search."""
    register_runtimes(monkeypatch)
    register_exports(monkeypatch)
    folder = copy_folder(ct2_folder, tmp_path / "model")
    assert export("--path", folder, "--with", "onnx") == 0
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES + ["", "the dog"]) + "\n")
    outputs = {}
    for engine in ("torch", "ctranslate2", "onnxruntime"):
        for verbose in ([], ["--verbose"]):
            capsys.readouterr()
            argv = [folder, "--engine", engine, "--input", source, "--threads", "1", "--beam", "3", *verbose]
            assert call_cli(interactive_main, argv) == 0
            outputs[engine, bool(verbose)] = capsys.readouterr().out
    for verbose in (False, True):
        torch_out = outputs["torch", verbose]
        assert outputs["onnxruntime", verbose] == torch_out
        if not verbose:
            assert outputs["ctranslate2", verbose] == torch_out
        else:
            for kind in "SHDP":
                assert _close(lines(outputs["ctranslate2", True], kind), lines(torch_out, kind)), kind
