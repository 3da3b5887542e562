"""Translation speed of nmt-generate against fairseq-generate and CTranslate2, side by side, on one model.

The model is fairseq 0.12's peer model (``--peer``: 3+3 layers, d 256, Multi30k en-de, imported with
``nmt-import-fairseq``), or any nmt checkpoint and data-bin (``--data``/``--path``; then fairseq-generate, which needs
a fairseq model, does not run). Every tool translates the test split (``--batch-size 128``), taking turns,
``--repeats`` times each, for every beam size asked for. Each tool's own search-time figure is compared (model
loading and start-up excluded: fairseq's "Translated ... (N sentences/s)" line, ours "translated ... (N
sentences/s)"), and so are the whole process's wall time and peak RSS (summed over a tool's processes). Ours runs in
the ``--precisions`` asked for (fp32, ``--bf16``, ``--quantize int8`` / ``fp16``); fairseq cannot run bf16 on a CPU.
With ``--workers N`` (default 2), ours also runs as N single-thread processes (``nmt-generate --workers N``, fp32 and
``--bf16``) and CTranslate2 float32 as N one-thread translators (its ``inter_threads``): each tool's way of spreading
a split over the cores. When ``ctranslate2`` is importable, the same weights exported by
``nmt.interop.ctranslate2_export`` run in CTranslate2 too (``ctranslate2_translate.py``: a process that imports only
ctranslate2), float32 also with its oneDNN backend (``CT2_USE_MKL=0``). The best hypotheses are compared with the
first tool's (fairseq-generate's, else nmt fp32's), BPE removed.

fairseq comes from the venv of ``../shared/tools/peer_fairseq.sh install`` (``--fairseq-venv``; skipped when absent).

    python -m benchmarks run generate_vs_fairseq [--peer ../shared/peer/fairseq-m30k] [--beams 5,1] [--repeats 2]
    python -m benchmarks run generate_vs_fairseq --data BIN --path CKPT [--precisions fp32,bf16] [--workers 1]
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import (
    add_fairseq_venv_argument,
    add_model_arguments,
    bpe_source,
    fairseq_env,
    fairseq_skipped,
    fairseq_venv,
    has_ctranslate2,
    model_inputs,
    nmt_command,
)
from benchmarks.measure_process import Measured, measure
from nmt.errors import NmtError

HERE = Path(__file__).resolve().parent
SPEED = re.compile(r"ranslated ([\d,]+) sentences .* in ([\d.]+)s \(([\d.]+) sentences/s")
PRECISIONS = {"fp32": [], "bf16": ["--bf16"], "int8": ["--quantize", "int8"], "fp16": ["--quantize", "fp16"]}
CT2_COMPUTE_TYPES = ("float32", "int8")  # int8 is a compute type of the float32 folder


def measured_run(cmd: list[str], env: dict[str, str], out: Path) -> tuple[str, Measured]:
    """stdout + stderr of ``cmd`` and its wall time, CPU time and peak RSS (``measure_process``)."""
    figures = measure(cmd, stdout=out, env=env)
    return out.read_text(encoding="utf-8") + figures.stderr, figures


def ctranslate2_export(model: Path, data: Path, work: Path) -> tuple[Path, list[str]]:
    """The checkpoint exported for CTranslate2 (float32 weights), and the symbols nmt's search never produces for
    it (CTranslate2 is told to suppress them)."""
    from nmt.data.data_bin import open_data_dir
    from nmt.generation.loading import load_model
    from nmt.interop.ctranslate2_export import export_ctranslate2, suppressed_symbols

    pair = open_data_dir(str(data), None, None)
    loaded: Any = load_model(str(model), pair.src_dict, pair.tgt_dict)  # any architecture: its cfg is read below
    folder = export_ctranslate2(loaded, pair.src_dict, pair.tgt_dict, work / "ct2", quantization=None)
    return Path(folder), [symbol for sequence in suppressed_symbols(loaded.cfg.decoder_start) for symbol in sequence]


def ctranslate2_command(folder: Path, source: Path, compute: str, beam: int, batch_size: int, threads: int,
                        suppress: list[str], inter_threads: int = 1) -> list[str]:
    """``ctranslate2_translate.py`` on the BPE'd ``source``, with nmt's search rules (``suppress``: the symbols
    nmt never produces for this model)."""
    return [sys.executable, str(HERE / "ctranslate2_translate.py"), str(folder), str(source),
            "--compute-type", compute, "--beam", str(beam), "--batch-size", str(batch_size),
            "--threads", str(threads), "--inter-threads", str(inter_threads), "--suppress", *suppress]


def hypotheses(text: str) -> dict[int, str]:
    """Sentence id -> best hypothesis (the H- lines), BPE removed."""
    return {int(m.group(1)): re.sub(r"@@( |$)", "", m.group(2))
            for m in re.finditer(r"^H-(\d+)\t[^\t]*\t(.*)$", text, re.M)}


def speed(text: str, tool: str) -> float:
    m = SPEED.search(text)
    if not m:
        raise NmtError(f"{tool}: no speed line in its output: {text.strip()[-300:]}")
    return float(m.group(3))


def tools_for(beam: int, args: argparse.Namespace, data: Path, model: Path, peer: Path | None, venv: Path | None,
              ct2: tuple[Path, Path, list[str]] | None, env: dict[str, str]) -> dict[str, tuple[list[str], dict]]:
    """name -> (command, environment) of every tool translating the test split with ``beam``."""
    tools: dict[str, tuple[list[str], dict]] = {}
    if venv is not None and peer is not None:
        tools["fairseq-generate"] = ([str(venv / "bin" / "fairseq-generate"), str(peer / "data-bin"), "--path",
                                      str(peer / "checkpoint_best.pt"), "--gen-subset", args.split, "--beam",
                                      str(beam), "--batch-size", str(args.batch_size), "--cpu"], env)
    base = nmt_command("nmt-generate", data, "--path", model, "--gen-subset", args.split, "--beam", beam,
                       "--batch-size", args.batch_size)
    threads = ["--threads", str(args.threads)] if args.threads else []
    for precision in args.precisions.split(","):
        tools[" ".join(["nmt-generate", *PRECISIONS[precision]])] = ([*base, *threads, *PRECISIONS[precision]], env)
    cores = args.threads or os.cpu_count() or 1
    per = max(1, cores // args.workers)
    if args.workers > 1:
        spread = [*base, "--workers", str(args.workers), "--threads", str(per)]
        for precision in ("fp32", "bf16"):
            if precision in args.precisions.split(","):
                tools[" ".join(["nmt-generate", *PRECISIONS[precision], "--workers", str(args.workers)])] = (
                    [*spread, *PRECISIONS[precision]], env)
    if ct2 is not None:
        folder, source, suppress = ct2
        for compute in args.ct2_types.split(","):
            tools[f"CTranslate2 {compute}"] = (
                ctranslate2_command(folder, source, compute, beam, args.batch_size, cores, suppress), env)
        tools["CTranslate2 float32, oneDNN"] = (
            ctranslate2_command(folder, source, "float32", beam, args.batch_size, cores, suppress),
            dict(env, CT2_USE_MKL="0"))
        if args.workers > 1:
            for backend, flag in (("", "1"), (", oneDNN", "0")):
                tools[f"CTranslate2 float32{backend}, inter_threads {args.workers}"] = (
                    ctranslate2_command(folder, source, "float32", beam, args.batch_size, per, suppress,
                                        args.workers), dict(env, CT2_USE_MKL=flag))
    return tools


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="generate_vs_fairseq", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(ap, "; fairseq-generate runs it as it is")
    ap.add_argument("--split", default="test", help="the split to translate [default: %(default)s]")
    add_fairseq_venv_argument(ap, "; with --peer only")
    ap.add_argument("--beams", default="5,1")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None, help="torch threads for all (default: torch's)")
    ap.add_argument("--precisions", default="fp32,bf16,int8,fp16", help="nmt-generate's: fp32, bf16, int8, fp16 "
                    "[default: %(default)s]")
    ap.add_argument("--ct2-types", default=",".join(CT2_COMPUTE_TYPES), help="CTranslate2's compute types "
                    "[default: %(default)s]")
    ap.add_argument("--workers", type=int, default=2, help="processes (CTranslate2: translators) for the rows that "
                    "spread the split over the cores, each with threads/workers threads (1: no such rows)")
    args = ap.parse_args(argv)
    unknown = set(args.precisions.split(",")) - set(PRECISIONS)
    if unknown:
        ap.error(f"--precisions: {', '.join(sorted(unknown))} is not one of {', '.join(PRECISIONS)}")

    env = fairseq_env(args.threads)
    with tempfile.TemporaryDirectory(prefix="nmt_vs_fairseq_") as tmp:
        work = Path(tmp)
        data, model, peer = model_inputs(args.data, args.path, args.peer, work)
        venv = fairseq_venv(args.fairseq_venv, "fairseq-generate") if peer is not None else None
        fairseq_off = fairseq_skipped("fairseq-generate", peer, venv)
        skipped = [fairseq_off] if fairseq_off else []
        ct2 = None
        if has_ctranslate2():
            folder, suppress = ctranslate2_export(model, data, work)
            ct2 = (folder, bpe_source(data, args.split, work / "source.bpe"), suppress)
        else:
            skipped.append("CTranslate2 (not installed: pip install 'nmt[ctranslate2]')")
        print(f"model: {peer / 'checkpoint_best.pt' if peer else model}; split {args.split}, batch size "
              f"{args.batch_size}, threads {args.threads or 'default'}; search time excludes start-up"
              + "".join(f"; skipped: {s}" for s in skipped))
        print("| beam | tool | sentences/s (runs) | whole process s | peak RSS MB (all processes) | vs first "
              "| hypotheses = first's |")
        print("|---|---|---|---|---|---|---|")
        figures = []
        for beam in [int(b) for b in args.beams.split(",")]:
            tools = tools_for(beam, args, data, model, peer, venv, ct2, env)
            speeds: dict[str, list[float]] = {name: [] for name in tools}
            runs: dict[str, list[Measured]] = {name: [] for name in tools}
            texts: dict[str, str] = {}
            for _ in range(args.repeats):  # taking turns, so a noisy minute hits every tool alike
                for name, (cmd, tool_env) in tools.items():
                    text, measured = measured_run(cmd, tool_env, work / "out.txt")
                    speeds[name].append(speed(text, name))
                    runs[name].append(measured)
                    texts[name] = text
            first = next(iter(tools))
            ref, base = hypotheses(texts[first]), max(speeds[first])
            row = []
            for name in tools:
                best = max(speeds[name])
                hyps = hypotheses(texts[name])
                same = sum(hyps.get(i) == h for i, h in ref.items())
                runs_text = " / ".join(f"{x:.1f}" for x in speeds[name])
                wall = min(m.wall_s for m in runs[name])
                peak = max(m.tree_mb for m in runs[name])
                print(f"| {beam} | {name} | **{best:.1f}** ({runs_text}) | {wall:.1f} | {peak:,.0f} "
                      f"| {best / base:.2f}x | {same}/{len(ref)} |", flush=True)
                row.append(f"{name} {best:.1f}" + (f" ({best / base:.2f}x, {same}/{len(ref)})" if name != first
                                                   else ""))
            figures.append(f"beam {beam}, sentences/s: " + ", ".join(row))
    return "; ".join(figures)
