"""nmt's benchmark suite: the table of benchmarks, and what they share to find their inputs.

Run from the repository's root: ``python -m benchmarks list`` names each benchmark, what it compares and the data
it needs; ``python -m benchmarks run NAME [ARGS...] [--record]`` runs one (``__main__.py``). A benchmark is a
module of this folder with ``main(argv) -> str``: it prints its figures and returns them as one line, the row
``--record`` appends to benchmarks/RESULTS.md. Every benchmark takes its data as arguments; the comparison tools
(fairseq 0.12 in its own venv, CTranslate2) are used when found and skipped with a line saying so when not.
tests/test_benchmarks_smoke.py runs each entry of ``BENCHMARKS`` with its ``tiny`` arguments, so none rots.
"""

from __future__ import annotations

import argparse  # the benchmarks are scripts, not nmt commands: no config dataclasses
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from nmt.errors import NmtError, UsageError

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"  # the workplace's data and peer models beside the checkout, named in --help defaults
PEER_MODEL = SHARED / "peer" / "fairseq-m30k"  # fairseq 0.12's Multi30k en-de model (checkpoint_best.pt, data-bin)
MULTI30K = SHARED / "data" / "multi30k"
FAIRSEQ_VENV = Path.home() / ".cache" / "nmt-peer" / "fairseq-venv"  # ../shared/tools/peer_fairseq.sh install


@dataclass(frozen=True)
class Benchmark:
    name: str  # its module in benchmarks/
    compares: str
    needs: str
    # a run of a few seconds on the smoke test's toy data: {data} a data-bin (en-de, train and test splits, Moses +
    # BPE), {checkpoint} a model trained on it, {model} that checkpoint's nmt-export folder, {raw} its raw text
    # (train, valid, test .en/.de), {shared} a folder laid out as ../shared/data, {work} an empty folder
    tiny: tuple[str, ...]


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("preprocess_vs_fairseq",
              "nmt-preprocess (Moses + joint BPE + binarize in one command, and binarizing alone) against fairseq's "
              "recipe (sacremoses, subword-nmt, fairseq-preprocess): wall, CPU, peak RSS",
              "--corpus DIR of raw parallel text (train/valid/test.en|de; make_large_corpus writes one); "
              "--fairseq-venv for fairseq's side",
              ("--corpus", "{raw}", "--work", "{work}", "--merges", "30", "--repeats", "1")),
    Benchmark("preprocess_memory",
              "nmt-preprocess's peak memory on a synthetic corpus of millions of pairs (bounded by the dictionary, "
              "not the corpus) and the time to open the result",
              "nothing (writes its own corpus)",
              ("--lines", "2000", "--tmp", "{work}")),
    Benchmark("train_throughput",
              "nmt's trainer in one process, fp32 and --bf16, against a stock torch.nn.Transformer of the same shape "
              "on the same batches; --profile: the matrix products' share and rate",
              "--data a data-bin (scripts/quickstart.sh writes data-bin/multi30k_en_de)",
              ("--data", "{data}", "--updates", "2", "--warmup", "1", "--rounds", "1", "--modes", "fp32",
               "--profile", "1", "--product-size", "256", "--layers", "1", "--dim", "32")),
    Benchmark("bench_criterion",
              "nmt's label-smoothed loss (forward + backward) against log_softmax and F.cross_entropy; the "
              "criterion projecting only non-pad positions against all",
              "nothing (random logits)",
              ("--tokens", "64", "--vocab", "50", "--repeats", "1")),
    Benchmark("train_vs_fairseq",
              "nmt-train against fairseq-train on the same data, fairseq's reference shape, taking turns: wps and "
              "peak RSS",
              "--nmt-data a data-bin (nmt-import-fairseq data of --fairseq-data for the same sentences); "
              "--fairseq-venv and --fairseq-data for fairseq's side",
              ("--nmt-data", "{data}", "--updates", "4", "--log-interval", "2", "--repeats", "1", "--nmt", "fp32=",
               "--layers", "1", "--dim", "32")),
    Benchmark("train_startup_vs_fairseq",
              "launch -> first update of nmt-train against fairseq-train on the same (large) data, and the memory "
              "until then",
              "--nmt-data a data-bin (preprocess_vs_fairseq --work W writes W/nmt-bin and W/fairseq-bin); "
              "--fairseq-venv and --fairseq-data for fairseq's side",
              ("--nmt-data", "{data}", "--repeats", "1", "--layers", "1", "--dim", "32")),
    Benchmark("attention_complexity",
              "forward + backward time and peak memory of one self-attention layer per attention plugin, n = "
              "128..4096: full attention ~n^2 against restricted ~n*r (log-log slopes, a PNG)",
              "nothing (random inputs)",
              ("--max-n", "256", "--dim", "32", "--budget", "0.01", "--png", "{work}/attention.png")),
    Benchmark("generate_vs_fairseq",
              "nmt-generate (fp32, --bf16, --quantize int8/fp16, --workers N) against fairseq-generate and "
              "CTranslate2 on the same model, taking turns: sentences/s, whole process, peak RSS, hypotheses equal",
              "--peer DIR (fairseq's model, imported) or --data BIN --path CKPT; --fairseq-venv for fairseq-generate; "
              "CTranslate2 when installed",
              ("--data", "{data}", "--path", "{checkpoint}", "--beams", "1", "--repeats", "1",
               "--precisions", "fp32", "--workers", "1", "--ct2-types", "float32")),
    Benchmark("constrained_decoding",
              "nmt-interactive --constraints against fairseq-interactive --constraints on the same model, terms drawn "
              "from the references (1-2 per sentence, Dinu et al. 2019): terms met, degenerate outputs, BLEU with "
              "and without the terms, sentences/s of search",
              "--peer DIR (fairseq's model, imported) or --data BIN --path CKPT; --source/--reference raw text "
              "(default Multi30k test2016); --fairseq-venv for fairseq-interactive",
              ("--data", "{data}", "--path", "{checkpoint}", "--source", "{raw}/test.en", "--reference",
               "{raw}/test.de", "--sentences", "6", "--min-chars", "3", "--beam", "2", "--repeats", "1", "--threads",
               "1")),
    Benchmark("decoder_step_profile",
              "where nmt-generate's search time goes per decoding step (products, attention, log-softmax, top-k, "
              "copies, Python), beside CTranslate2's time on the same weights",
              "--peer DIR or --data BIN --path CKPT; --ctranslate2 needs CTranslate2",
              ("--data", "{data}", "--path", "{checkpoint}", "--beam", "2", "--threads", "1", "--by-rows",
               "--ctranslate2")),
    Benchmark("export_agreement",
              "the exported forms against the checkpoint: the nmt-export folder (nmt-generate and the Python API) "
              "and CTranslate2 greedy, sentence for sentence",
              "--data BIN --path CKPT (or --peer DIR); --source FILE, the split's raw text, for the Python API",
              ("--data", "{data}", "--path", "{checkpoint}", "--folder", "{model}", "--source", "{raw}/test.en",
               "--beams", "1", "--threads", "1")),
    Benchmark("serve_load",
              "nmt-serve under 1..64 concurrent one-sentence clients against nmt-generate's batches on the same "
              "model; the latency of one sentence alone",
              "--model DIR --data BIN (or --peer DIR); --sentences FILE of raw text",
              ("--model", "{model}", "--data", "{data}", "--sentences", "{raw}/test.en", "--beam", "1", "--threads",
               "1", "--clients", "2", "--requests", "4", "--seconds", "20", "--latency-requests", "2")),
    Benchmark("recipe_latency",
              "one sentence alone with each recipe's model (nmt.load, engine by engine): the latency half of "
              "docs/recipes.md's quality/latency table",
              "--data BIN --path LABEL=CKPT (one per recipe); --sentences FILE of raw text",
              ("--data", "{data}", "--path", "tiny={checkpoint}", "--sentences", "{raw}/test.en", "--count", "2",
               "--beams", "1")),
    Benchmark("serve_fairness",
              "one client's one-sentence latency on nmt-serve alone against beside a client hogging it with the "
              "largest requests it allows (p50, p95, their ratio)",
              "--model DIR (or --tiny: a model trained here in seconds); --sentences FILE of raw text",
              ("--model", "{model}", "--sentences", "{raw}/train.en", "--beam", "1", "--threads", "1", "--big", "8",
               "--requests", "3", "--seconds", "20")),
    Benchmark("serve_memory",
              "nmt-serve's resident memory steady, after probes (distinct search options, bad requests), at a load "
              "run's peak and idle after it: it must come back near the steady figure",
              "--model DIR (or --tiny: a model trained here in seconds); --sentences FILE of raw text",
              ("--model", "{model}", "--sentences", "{raw}/train.en", "--threads", "1", "--big", "4", "--probes", "3",
               "--clients", "2", "--seconds", "1", "--rounds", "1")),
    Benchmark("make_large_corpus",
              "(a data maker) a seeded en-de corpus of N pairs from ../shared/data, for speed and memory at scale "
              "(preprocess_vs_fairseq, train_startup_vs_fairseq), not quality",
              "--data, the shared data folder (Multi30k, Bible, WMT newstest, IWSLT'14)",
              ("--pairs", "50", "--out", "{work}/corpus", "--data", "{shared}")),
)

HELPERS: dict[str, str] = {
    "measure_process": "wall time, CPU time and peak RSS of a command and everything it starts",
    "ctranslate2_translate": "a CTranslate2 folder translates a BPE'd file in a process that imports only ctranslate2",
    "serve_process": "a real nmt-serve on localhost for serve_fairness and serve_memory, and a tiny model for them",
}


def benchmark(name: str) -> Benchmark:
    for entry in BENCHMARKS:
        if entry.name == name:
            return entry
    kind = "a helper, not a benchmark" if name in HELPERS else "not a benchmark"
    raise UsageError(f"{name}: {kind}; `python -m benchmarks list` names them")


def existing(path: str | Path | None, flag: str, fix: str = "") -> Path:
    """``path`` when it exists; else a one-line error naming ``flag`` (and ``fix``, what to do)."""
    if path is None:
        raise UsageError(f"{flag}: not given" + (f"; {fix}" if fix else ""))
    if not Path(path).exists():
        raise UsageError(f"{flag} {path}: not found" + (f"; {fix}" if fix else ""))
    return Path(path)


def data_bin(path: str | Path | None, flag: str) -> Path:
    """``path`` when it is an nmt data-bin (its metadata.json); else a one-line error naming ``flag``."""
    folder = existing(path, flag, "give an nmt data-bin (nmt-preprocess, nmt-import-fairseq data)")
    if not (folder / "metadata.json").is_file():
        raise UsageError(f"{flag} {folder}: not an nmt data-bin (no metadata.json)")
    return folder


def fairseq_venv(path: str | None, tool: str = "fairseq-train") -> Path | None:
    """The venv of fairseq 0.12 (``--fairseq-venv``): the one given, which must hold ``tool``, else the default one
    when it is installed, else None (fairseq's side is skipped; the caller prints a line saying so)."""
    if path is not None:
        venv = existing(path, "--fairseq-venv", "../shared/tools/peer_fairseq.sh install builds it")
        if not (venv / "bin" / tool).exists():
            raise UsageError(f"--fairseq-venv {venv}: no bin/{tool} there; ../shared/tools/peer_fairseq.sh install")
        return venv
    return FAIRSEQ_VENV if (FAIRSEQ_VENV / "bin" / tool).exists() else None


def add_fairseq_venv_argument(ap: argparse.ArgumentParser, when: str = "") -> None:
    """``--fairseq-venv``, read by :func:`fairseq_venv`; ``when`` adds when fairseq runs at all."""
    ap.add_argument("--fairseq-venv", help="fairseq 0.12's venv (../shared/tools/peer_fairseq.sh install) [default: "
                    f"~/.cache/nmt-peer/fairseq-venv when it is there; else fairseq's side is skipped{when}]")


def fairseq_env(threads: int | None = None) -> dict[str, str]:
    """The environment fairseq 0.12 runs in (and the nmt commands beside it, alike): torch's weights-only loading off,
    since fairseq's checkpoints pickle an argparse.Namespace; ``threads`` for every tool's OpenMP and MKL."""
    env = dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def fairseq_skipped(tool: str, peer: Path | None, venv: Path | None) -> str | None:
    """Why ``tool`` of fairseq does not run (None when it does): fairseq runs only the peer's model, from its venv."""
    if peer is None:
        return f"{tool} (it runs --peer's fairseq model, not --path)"
    if venv is None:
        return f"{tool} (no venv: --fairseq-venv; ../shared/tools/peer_fairseq.sh install)"
    return None


def has_ctranslate2() -> bool:
    return importlib.util.find_spec("ctranslate2") is not None


def nmt_command(name: str, *argv: object) -> list[str]:
    """An nmt console script (``nmt-generate``, ...) run by this Python, whether or not its venv is on PATH."""
    module = name.removeprefix("nmt-").replace("-", "_")
    return [sys.executable, "-c", f"from nmt.cli.{module} import main; main()", *map(str, argv)]


def run_nmt(name: str, *argv: object) -> str:
    """stdout + stderr of an nmt command; its last lines as a one-line error when it fails."""
    done = subprocess.run(nmt_command(name, *argv), capture_output=True, text=True)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise NmtError(f"{name} failed ({done.returncode}): {last}")
    return done.stdout + done.stderr


def add_model_arguments(parser: argparse.ArgumentParser, peer_help: str = "") -> None:
    """--data/--path (an nmt data-bin and checkpoint) or --peer (fairseq's model folder, imported)."""
    parser.add_argument("--data", help="an nmt data-bin with the split to translate (with --path)")
    parser.add_argument("--path", help="an nmt checkpoint trained on --data")
    parser.add_argument("--peer", default=str(PEER_MODEL), help="without --data/--path: a fairseq 0.12 model folder "
                        "(checkpoint_best.pt, data-bin/, bpe.codes), imported for nmt" + peer_help
                        + " [default: %(default)s]")


def model_inputs(data: str | None, path: str | None, peer: str, work: Path) -> tuple[Path, Path, Path | None]:
    """(data-bin, checkpoint, the peer folder or None): --data and --path as given, else the peer imported."""
    if data or path:
        checkpoint = existing(path, "--path", "give the checkpoint trained on --data")
        return data_bin(data, "--data"), checkpoint, None
    folder = existing(peer, "--peer", "give --data BIN --path CKPT, or a fairseq model folder")
    imported, checkpoint = work / "peer-bin", work / "peer.pt"
    run_nmt("nmt-import-fairseq", "data", "--path", folder / "data-bin", "--output", imported, "--tokenizer", "moses",
            "--bpe", "subword_nmt", "--bpe-codes", folder / "bpe.codes")
    run_nmt("nmt-import-fairseq", "checkpoint", "--path", folder / "checkpoint_best.pt", "--data", imported,
            "--output", checkpoint)
    return imported, checkpoint, folder


def bpe_source(data: Path, split: str, out: Path) -> Path:
    """The split's source sentences as the data-bin holds them (BPE'd tokens, without </s>), one per line: what a
    CTranslate2 translator of the same model reads."""
    from nmt.data.data_bin import open_data_dir
    from nmt.data.language_pair_dataset import load_language_pair

    pair = open_data_dir(str(data), None, None)
    dataset = load_language_pair(str(data), split, pair.src, pair.tgt)
    lines = (" ".join(pair.src_dict[i] for i in dataset[k]["source"].tolist()[:-1]) for k in range(len(dataset)))
    out.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return out
