"""Translation speed of nmt-generate against fairseq-generate, side by side, on one fairseq model.

The peer fairseq 0.12 model (``../shared/peer/fairseq-m30k``: 3+3 layers, d 256, Multi30k en-de)
is imported with ``nmt-import-fairseq``; then both command lines translate test_2016_flickr
(1,000 sentences, ``--batch-size 128``), taking turns, ``--repeats`` times each, for every beam
size asked for. Each tool's own search-time figure is compared (model loading and start-up
excluded: fairseq's "Translated ... (N sentences/s)" line, ours "translated ... (N sentences/s)"),
and so are the whole process's wall time and peak RSS. Ours runs in fp32, with ``--bf16`` and with
``--quantize int8`` and ``fp16``; fairseq cannot run bf16 on a CPU. When ``ctranslate2`` is importable, the same
weights exported by ``nmt.interop.ctranslate2_export`` run in CTranslate2 too, float32 and int8
(``ctranslate2_translate.py``: a process that imports only ctranslate2), float32 also with its oneDNN backend
(``CT2_USE_MKL=0``) beside its default one. With ``--workers N`` (default 2), ours also runs as N single-thread
processes (``nmt-generate --workers N``, fp32 and ``--bf16``) and CTranslate2 float32 as N one-thread translators
(its ``inter_threads``), each tool's way of spreading a split over the cores. The best hypotheses are
compared with fairseq's (BPE removed). Peak RSS is summed over a tool's processes.

fairseq comes from the venv that ``../shared/tools/peer_fairseq.sh install`` builds
(``--fairseq-bin``; default ``~/.cache/nmt-peer/fairseq-venv/bin``).

    python benchmarks/generate_vs_fairseq.py [--beams 5,1] [--repeats 2] [--threads N] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from measure_process import Measured, measure  # noqa: E402  (the benchmarks' one measuring helper)

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared"
SPEED = re.compile(r"ranslated ([\d,]+) sentences .* in ([\d.]+)s \(([\d.]+) sentences/s")


def run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    """stdout + stderr of ``cmd``; stops the benchmark when it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        sys.exit(f"generate_vs_fairseq: {' '.join(cmd[:2])} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc.stdout + proc.stderr


def measured_run(cmd: list[str], env: dict[str, str], out: Path) -> tuple[str, Measured]:
    """stdout + stderr of ``cmd`` and its wall time, CPU time and peak RSS (``measure_process``)."""
    figures = measure(cmd, stdout=out, env=env)
    return out.read_text(encoding="utf-8") + figures.stderr, figures


def import_peer(peer: Path, work: Path) -> tuple[Path, Path]:
    """The fairseq peer model and its data-bin imported for nmt into ``work``: (data-bin, checkpoint)."""
    data, model = work / "data-bin", work / "model.pt"
    run(["nmt-import-fairseq", "data", "--path", str(peer / "data-bin"), "--output", str(data),
         "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", str(peer / "bpe.codes")])
    run(["nmt-import-fairseq", "checkpoint", "--path", str(peer / "checkpoint_best.pt"), "--data", str(data),
         "--output", str(model)])
    return data, model


CT2_COMPUTE_TYPES = ("float32", "int8")  # int8 is a compute type of the float32 folder


def ctranslate2_folder(model: Path, data: Path, work: Path) -> Path | None:
    """The imported model exported for CTranslate2 (float32 weights), or None when ctranslate2 is
    not installed."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return None
    from nmt.generation.inference import load_model, open_data_dir
    from nmt.interop.ctranslate2_export import export_ctranslate2

    pair = open_data_dir(str(data), None, None)
    loaded = load_model(str(model), pair.src_dict, pair.tgt_dict)
    return Path(export_ctranslate2(loaded, pair.src_dict, pair.tgt_dict, work / "ct2", quantization=None))


def ctranslate2_command(folder: Path, source: Path, compute: str, beam: int, batch_size: int,
                        threads: int, inter_threads: int = 1) -> list[str]:
    """``ctranslate2_translate.py`` on the BPE'd ``source``, with nmt's search rules for the imported
    model (it starts decoding from </s>, so <s> is suppressed as well as <pad>)."""
    return [sys.executable, str(HERE / "ctranslate2_translate.py"), str(folder), str(source),
            "--compute-type", compute, "--beam", str(beam), "--batch-size", str(batch_size),
            "--threads", str(threads), "--inter-threads", str(inter_threads), "--suppress", "<pad>", "<s>"]


def hypotheses(text: str, remove_bpe: bool) -> dict[int, str]:
    """Sentence id -> best hypothesis (the H- lines), BPE removed when asked."""
    out = {}
    for m in re.finditer(r"^H-(\d+)\t[^\t]*\t(.*)$", text, re.M):
        hyp = m.group(2)
        out[int(m.group(1))] = re.sub(r"@@( |$)", "", hyp) if remove_bpe else hyp
    return out


def speed(text: str) -> float:
    m = SPEED.search(text)
    if not m:
        sys.exit("generate_vs_fairseq: no speed line in the output:\n" + text[-1000:])
    return float(m.group(3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peer", default=str(SHARED / "peer" / "fairseq-m30k"), help="the fairseq model folder")
    ap.add_argument("--fairseq-bin", default=str(Path.home() / ".cache/nmt-peer/fairseq-venv/bin"))
    ap.add_argument("--beams", default="5,1")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None, help="torch threads for both (default: torch's)")
    ap.add_argument("--workers", type=int, default=2, help="processes (CTranslate2: translators) for the rows that "
                    "spread the split over the cores, each with threads/workers threads (1: no such rows)")
    args = ap.parse_args()
    peer, fs_bin = Path(args.peer), Path(args.fairseq_bin)
    if not (fs_bin / "fairseq-generate").exists():
        sys.exit(f"generate_vs_fairseq: {fs_bin}/fairseq-generate not found; run "
                 f"{SHARED}/tools/peer_fairseq.sh install, or pass --fairseq-bin")

    env = dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")  # fairseq 0.12 pickles argparse.Namespace
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    work = Path(tempfile.mkdtemp(prefix="nmt_vs_fairseq_"))
    data, model = import_peer(peer, work)
    ct2 = ctranslate2_folder(model, data, work)
    threads = ["--threads", str(args.threads)] if args.threads else []
    print(f"model: {peer / 'checkpoint_best.pt'} (imported for nmt); test_2016_flickr, batch size "
          f"{args.batch_size}, threads {args.threads or 'default'}; search time excludes start-up"
          + ("" if ct2 else "; no ctranslate2 installed: its rows are left out"))
    print("| beam | tool | sentences/s (runs) | whole process s | peak RSS MB (all processes) | vs fairseq "
          "| hypotheses = fairseq's |")
    print("|---|---|---|---|---|---|---|")
    for beam in [int(b) for b in args.beams.split(",")]:
        base = ["nmt-generate", str(data), "--path", str(model), "--gen-subset", "test", "--beam", str(beam),
                "--batch-size", str(args.batch_size)]
        nmt = [*base, *threads]
        tools: dict[str, tuple[list[str], dict[str, str]]] = {  # name: (command, environment)
            "fairseq-generate": ([str(fs_bin / "fairseq-generate"), str(peer / "data-bin"), "--path",
                                  str(peer / "checkpoint_best.pt"), "--gen-subset", "test", "--beam", str(beam),
                                  "--batch-size", str(args.batch_size), "--cpu"], env),
            "nmt-generate": (nmt, env),
            "nmt-generate --bf16": ([*nmt, "--bf16"], env),
            "nmt-generate --quantize int8": ([*nmt, "--quantize", "int8"], env),
            "nmt-generate --quantize fp16": ([*nmt, "--quantize", "fp16"], env),
        }
        cores = args.threads or os.cpu_count() or 1
        per = max(1, cores // args.workers)
        if args.workers > 1:
            spread = [*base, "--workers", str(args.workers), "--threads", str(per)]
            tools[f"nmt-generate --workers {args.workers}"] = (spread, env)
            tools[f"nmt-generate --bf16 --workers {args.workers}"] = ([*spread, "--bf16"], env)
        source = peer / "test_2016_flickr.bpe.en"
        for compute in CT2_COMPUTE_TYPES if ct2 is not None else ():
            tools[f"CTranslate2 {compute}"] = (
                ctranslate2_command(ct2, source, compute, beam, args.batch_size, cores), env)
        if ct2 is not None:
            tools["CTranslate2 float32, oneDNN"] = (
                ctranslate2_command(ct2, source, "float32", beam, args.batch_size, cores), dict(env, CT2_USE_MKL="0"))
            if args.workers > 1:
                for backend, flag in (("", "1"), (", oneDNN", "0")):
                    tools[f"CTranslate2 float32{backend}, inter_threads {args.workers}"] = (
                        ctranslate2_command(ct2, source, "float32", beam, args.batch_size, per, args.workers),
                        dict(env, CT2_USE_MKL=flag))
        figures: dict[str, list[float]] = {name: [] for name in tools}
        runs: dict[str, list[Measured]] = {name: [] for name in tools}
        texts: dict[str, str] = {}
        for _ in range(args.repeats):  # taking turns, so a noisy minute hits every tool alike
            for name, (cmd, tool_env) in tools.items():
                text, measured = measured_run(cmd, tool_env, work / "out.txt")
                figures[name].append(speed(text))
                runs[name].append(measured)
                texts[name] = text
        ref = hypotheses(texts["fairseq-generate"], remove_bpe=True)
        base = max(figures["fairseq-generate"])
        for name in tools:
            best = max(figures[name])
            hyps = hypotheses(texts[name], remove_bpe=True)
            same = sum(hyps.get(i) == h for i, h in ref.items())
            speeds = " / ".join(f"{x:.1f}" for x in figures[name])
            wall = min(m.wall_s for m in runs[name])
            peak = max(m.tree_mb for m in runs[name])
            print(f"| {beam} | {name} | **{best:.1f}** ({speeds}) | {wall:.1f} | {peak:,.0f} | {best / base:.2f}x "
                  f"| {same}/{len(ref)} |", flush=True)


if __name__ == "__main__":
    main()
