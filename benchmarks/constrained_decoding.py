"""Lexically constrained decoding, nmt against fairseq 0.12 on the same weights: terms met, degenerate outputs, BLEU
and search speed.

The model is fairseq 0.12's peer model (``--peer``, imported with ``nmt-import-fairseq``; fairseq-interactive runs it
as it is) or any nmt checkpoint and data-bin (``--data``/``--path``; fairseq then does not run). The constraints come
from the references, as in Dinu et al. (2019): per sentence, one or two words of the reference (``--max-terms``) of at
least ``--min-chars`` characters that nmt's unconstrained translation lacks, chosen with ``--seed`` (a sentence
without such a word gets none). Both toolkits read them the same way: raw text after the source, tab-separated,
tokenized and BPE'd like the target (``nmt-interactive --constraints``, ``fairseq-interactive --constraints``), in
buffers of ``--batch-size`` sentences at beam ``--beam``, taking turns ``--repeats`` times.

Per run it prints: the constraints met, on the search's own pieces (the term's pieces in a row in the output) and as
whole words of the tokenized output; the degenerate outputs (a piece, or a group of up to three, repeated three
times or more in a row where the reference has no such run, as fairseq's "Fotoststststst...schlossartigen"); the
detokenized output's sacreBLEU against the references; sentences/s of search alone (each tool's own figure: nmt's
"translated ... sentences/s", fairseq's "translation time").

fairseq comes from the venv of ``../shared/tools/peer_fairseq.sh install`` (``--fairseq-venv``; skipped, with a line
saying so, when absent).

    python -m benchmarks run constrained_decoding [--peer ../shared/peer/fairseq-m30k] [--sentences 1000]
    python -m benchmarks run constrained_decoding --data BIN --path CKPT --source RAW.en --reference RAW.de
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import random
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import (
    MULTI30K,
    add_fairseq_venv_argument,
    add_model_arguments,
    existing,
    fairseq_env,
    fairseq_skipped,
    fairseq_venv,
    model_inputs,
    nmt_command,
)
from nmt.errors import NmtError, UsageError

NMT_SPEED = re.compile(r"translated ([\d,]+) sentences .* in ([\d.]+)s \(([\d.]+) sentences/s")
FAIRSEQ_TIME = re.compile(r"translation time: ([\d.]+)")
REPEATS_IN_A_ROW = 3  # a piece (or a group of pieces) this many times in a row is a degenerate output...
LONGEST_GROUP = 3  # ... for groups of up to this many pieces


@dataclass
class Run:
    """One tool's translations of the source: per sentence its pieces (H- lines) and detokenized text (D- lines),
    and its search speeds."""

    pieces: dict[int, list[str]] = field(default_factory=dict)
    text: dict[int, str] = field(default_factory=dict)
    speeds: list[float] = field(default_factory=list)


def read_text(path: Path, count: int | None) -> list[str]:
    """The first ``count`` lines (all: None) of a plain or gzipped text file."""
    from nmt.data.corpus_files import read_lines

    lines: list[str] = []
    for line in read_lines(path):
        if count is not None and len(lines) >= count:
            break
        lines.append(line)
    return lines


def parse_output(text: str, tool: str, sentences: int) -> Run:
    """The H- (pieces) and D- (detokenized) lines of an nmt-interactive --verbose or fairseq-interactive output."""
    run = Run()
    for kind, sid, body in re.findall(r"^([HD])-(\d+)\t[^\t]*\t(.*)$", text, re.M):
        if kind == "H":
            run.pieces.setdefault(int(sid), body.split())
        else:
            run.text.setdefault(int(sid), body)
    if len(run.text) != sentences:
        raise NmtError(f"{tool}: {len(run.text)} translations for {sentences} sentences: {text.strip()[-300:]}")
    return run


def search_speed(text: str, tool: str, sentences: int) -> float:
    """sentences/s of search alone, as the tool reports it."""
    if tool.startswith("nmt"):
        m = NMT_SPEED.search(text)
        if m:
            return float(m.group(3))
    else:
        m = FAIRSEQ_TIME.search(text)
        if m:
            return sentences / max(float(m.group(1)), 1e-9)
    raise NmtError(f"{tool}: no speed line in its output: {text.strip()[-300:]}")


def has_run(pieces: list[str], unit: tuple[str, ...], times: int) -> bool:
    """Whether ``unit`` comes ``times`` times in a row in ``pieces``."""
    run = list(unit) * times
    return any(pieces[i:i + len(run)] == run for i in range(len(pieces) - len(run) + 1))


def repeated_units(pieces: list[str]) -> set[tuple[str, ...]]:
    """Each group of 1..LONGEST_GROUP pieces that comes REPEATS_IN_A_ROW times or more in a row."""
    found = set()
    for n in range(1, LONGEST_GROUP + 1):
        for i in range(len(pieces) - n * REPEATS_IN_A_ROW + 1):
            unit = tuple(pieces[i:i + n])
            if all(tuple(pieces[i + k * n:i + (k + 1) * n]) == unit for k in range(1, REPEATS_IN_A_ROW)):
                found.add(unit)
    return found


def degenerate(pieces: list[str], reference: list[str]) -> bool:
    """An output with a repeated piece (or group) that its reference does not repeat so."""
    return any(not has_run(reference, unit, REPEATS_IN_A_ROW) for unit in repeated_units(pieces))


def contains(sequence: list[str], part: list[str]) -> bool:
    return any(sequence[i:i + len(part)] == part for i in range(len(sequence) - len(part) + 1))


def choose_terms(references: list[list[str]], outputs: list[list[str]], min_chars: int, max_terms: int, seed: int,
                 usable: Any) -> list[list[str]]:
    """Per sentence, up to ``max_terms`` (1 or up to it, at random) words of its tokenized reference of at least
    ``min_chars`` letters that the tokenized unconstrained output lacks and the model can write (``usable``)."""
    rng = random.Random(seed)
    chosen = []
    for words, output in zip(references, outputs):
        have = set(output)
        candidates = list(dict.fromkeys(w for w in words if len(w) >= min_chars and w.isalpha() and w not in have
                                        and usable(w)))
        count = min(len(candidates), rng.randint(1, max_terms))
        picked = set(rng.sample(candidates, count)) if count else set()
        chosen.append([w for w in candidates if w in picked])  # in the reference's order
    return chosen


def run_tool(cmd: list[str], env: dict[str, str], tool: str, sentences: int, run: Run) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise NmtError(f"{tool} failed ({done.returncode}): {last}")
    found = parse_output(done.stdout, tool, sentences)
    run.pieces, run.text = found.pieces, found.text
    run.speeds.append(search_speed(done.stdout + done.stderr, tool, sentences))


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="constrained_decoding", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(ap, "; fairseq-interactive runs it as it is")
    ap.add_argument("--source", default=str(MULTI30K / "test_2016_flickr.en.gz"),
                    help="raw source sentences (plain or gzipped) [default: %(default)s]")
    ap.add_argument("--reference", default=str(MULTI30K / "test_2016_flickr.de.gz"),
                    help="their raw references, where the terms come from [default: %(default)s]")
    ap.add_argument("--sentences", type=int, default=None, help="the first N sentences only [default: all]")
    ap.add_argument("--min-chars", type=int, default=6, help="a term has at least this many letters [default: "
                    "%(default)s]")
    ap.add_argument("--max-terms", type=int, default=2, help="terms per sentence: 1 to this many [default: "
                    "%(default)s]")
    ap.add_argument("--seed", type=int, default=1, help="chooses the terms [default: %(default)s]")
    ap.add_argument("--mode", choices=["unordered", "ordered"], default="unordered", help="--constraints MODE of "
                    "both tools (a bare --constraints is ordered in fairseq, unordered in nmt) [default: %(default)s]")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128, help="sentences per buffer and batch [default: "
                    "%(default)s]")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each tool, taking turns; the best speed counts")
    ap.add_argument("--threads", type=int, default=None, help="torch threads for all (default: torch's)")
    ap.add_argument("--show", type=int, default=0, help="print up to N outputs of each constrained run that are "
                                                        "degenerate or miss a term as a whole word [default: 0]")
    add_fairseq_venv_argument(ap, "; with --peer only")
    args = ap.parse_args(argv)
    if not 1 <= args.max_terms <= 10 or args.min_chars < 1 or args.repeats < 1:
        raise UsageError("--max-terms in 1..10, --min-chars and --repeats at least 1")

    from nmt.data.data_bin import open_data_dir
    from nmt.data.text_pipeline import load_text_pipeline
    from nmt.generation.output import corpus_scores

    sources = read_text(existing(args.source, "--source", "raw source sentences"), args.sentences)
    references = read_text(existing(args.reference, "--reference", "the raw references of --source"),
                           len(sources))
    if len(references) != len(sources):
        raise UsageError(f"--reference {args.reference}: {len(references)} lines for {len(sources)} sources")
    env = fairseq_env(args.threads)
    threads = ["--threads", str(args.threads)] if args.threads else []
    with tempfile.TemporaryDirectory(prefix="nmt_constrained_") as tmp:
        work = Path(tmp)
        data, model, peer = model_inputs(args.data, args.path, args.peer, work)
        venv = fairseq_venv(args.fairseq_venv, "fairseq-interactive") if peer is not None else None
        pair = open_data_dir(str(data), None, None)
        target = load_text_pipeline(data, pair.tgt)
        plain, constrained = work / "source.txt", work / "constrained.txt"
        plain.write_text("".join(f"{s}\n" for s in sources), encoding="utf-8")

        def nmt_cmd(source: Path, *flags: str) -> list[str]:
            return nmt_command("nmt-interactive", data, "--path", model, "--input", source, "--verbose", "--beam",
                               args.beam, "--buffer-size", args.batch_size, *threads, *flags)

        def fairseq_cmd(source: Path, *flags: str) -> list[str]:
            assert venv is not None and peer is not None
            return [str(venv / "bin" / "fairseq-interactive"), str(peer / "data-bin"), "--path",
                    str(peer / "checkpoint_best.pt"), "--source-lang", pair.src, "--target-lang", pair.tgt,
                    "--input", str(source), "--beam", str(args.beam), "--buffer-size", str(args.batch_size),
                    "--batch-size", str(args.batch_size), "--cpu", "--tokenizer", "moses", "--bpe", "subword_nmt",
                    "--bpe-codes", str(peer / "bpe.codes"), *flags]

        runs: dict[str, Run] = {name: Run() for name in ("nmt", "nmt constrained")}
        run_tool(nmt_cmd(plain), env, "nmt", len(sources), runs["nmt"])  # the terms are what this one lacks

        def usable(word: str) -> bool:
            return all(pair.tgt_dict.index(p) >= pair.tgt_dict.nspecial for p in target.encode(word).split())

        tokenized_refs = [target.tokenizer.encode(r).split() for r in references]
        outputs = [target.tokenizer.encode(runs["nmt"].text[k]).split() for k in range(len(sources))]
        terms = choose_terms(tokenized_refs, outputs, args.min_chars, args.max_terms, args.seed, usable)
        constrained.write_text("".join("\t".join([s, *t]) + "\n" for s, t in zip(sources, terms)), encoding="utf-8")
        tools: dict[str, list[str]] = {"nmt": nmt_cmd(plain),
                                       "nmt constrained": nmt_cmd(constrained, "--constraints", args.mode)}
        fairseq_off = fairseq_skipped("fairseq-interactive", peer, venv)
        skipped = f"; skipped: {fairseq_off}" if fairseq_off else ""
        if venv is not None:
            tools["fairseq"] = fairseq_cmd(plain)
            tools["fairseq constrained"] = fairseq_cmd(constrained, "--constraints", args.mode)
            runs.update({"fairseq": Run(), "fairseq constrained": Run()})
        runs["nmt"].speeds.clear()  # the first run chose the terms; the timed ones take turns below
        for _ in range(args.repeats):
            for name, cmd in tools.items():
                run_tool(cmd, env, name, len(sources), runs[name])

        phrases = [(k, target.encode(t).split(), target.tokenizer.encode(t).split())
                   for k, words in enumerate(terms) for t in words]
        ref_pieces = [target.encode(r).split() for r in references]
        constrained_sentences = sum(1 for t in terms if t)
        print(f"model: {peer / 'checkpoint_best.pt' if peer else model}; {len(sources)} sentences, "
              f"{constrained_sentences} with terms ({len(phrases)} terms of >= {args.min_chars} letters, 1 to "
              f"{args.max_terms} per sentence, seed {args.seed}, {args.mode}); beam {args.beam}, batch "
              f"{args.batch_size}, threads {args.threads or 'default'}; search time excludes start-up{skipped}")
        print("| run | terms met (pieces) | terms met (words) | degenerate outputs | BLEU | sentences/s (runs) "
              "| vs nmt |")
        print("|---|---|---|---|---|---|---|")
        base = max(runs["nmt"].speeds)
        figures = []
        for name, run in runs.items():
            words = [target.tokenizer.encode(run.text[k]).split() for k in range(len(sources))]
            met_pieces = sum(contains(run.pieces.get(k, []), p) for k, p, _ in phrases)
            met_words = sum(contains(words[k], w) for k, _, w in phrases)
            bad = sum(degenerate(run.pieces.get(k, []), ref_pieces[k]) for k in range(len(sources)))
            (bleu, _), = corpus_scores([run.text[k] for k in range(len(sources))], references, chrf=False)
            best = max(run.speeds)
            share = f"{100 * met_pieces / len(phrases):.1f}%" if phrases else "-"
            share_words = f"{100 * met_words / len(phrases):.1f}%" if phrases else "-"
            runs_text = " / ".join(f"{s:.1f}" for s in run.speeds)
            print(f"| {name} | {share} | {share_words} | {bad} | {bleu.score:.2f} | **{best:.1f}** ({runs_text}) "
                  f"| {best / base:.2f}x |", flush=True)
            figures.append(f"{name}: met {share}, degenerate {bad}, BLEU {bleu.score:.2f}, {best:.1f} sent/s")
            if args.show and name.endswith("constrained"):
                shown = [k for k in range(len(sources)) if degenerate(run.pieces.get(k, []), ref_pieces[k])]
                shown += [k for k, _, w in phrases if not contains(words[k], w)]
                for k in list(dict.fromkeys(shown))[:args.show]:
                    print(f"  {name}, sentence {k} {terms[k]}: {' '.join(run.pieces.get(k, []))}")
        sys.stdout.flush()
    return "; ".join(figures)
