"""Training and decoding speed of two nmt installs (e.g. the last release and a change), side by side,
taking turns in one run, so a change's cost shows as a ratio even on a noisy machine.

Each install is a Python (a venv with nmt installed from its own checkout). Training: each checkout's
own ``benchmarks/train_throughput.py`` (fp32 and --bf16, nmt only). Decoding: the peer fairseq model
(``../shared/peer/fairseq-m30k``) is imported by each install, then its ``nmt-generate`` translates
test_2016_flickr (1,000 sentences, --batch-size 128, beam 5), fp32 and --bf16; the search's own
sentences/s is read from its summary line.

    python benchmarks/compare_installs.py --before /work/baseline/.venv/bin/python \\
        --after .venv/bin/python --data data-bin/multi30k_en_de [--rounds 2] [--updates 40]
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import click

HERE = Path(__file__).resolve().parent
PEER = HERE.parent.parent / "shared" / "peer" / "fairseq-m30k"
TRAIN_WPS = re.compile(r"^(fp32|bf16): nmt ([\d,]+) wps", re.M)
DECODE = re.compile(r"ranslated [\d,]+ sentences .* \(([\d.]+) sentences/s")


def run(cmd: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if done.returncode:
        sys.exit(f"compare_installs: {' '.join(map(str, cmd[:3]))} failed:\n{done.stderr[-2000:]}")
    return done.stdout + done.stderr


def checkout_of(python: str) -> Path:
    """The folder the install's nmt package comes from (its checkout)."""
    code = "import nmt, pathlib; print(pathlib.Path(nmt.__file__).resolve().parent.parent)"
    return Path(run([python, "-c", code], cwd=Path(tempfile.gettempdir())).strip())


def console(python: str, name: str) -> str:
    return str(Path(python).parent / name)


def import_peer(python: str, folder: Path) -> tuple[Path, Path]:
    """The peer model and data imported by this install: (data-bin, checkpoint)."""
    data, ckpt = folder / "data", folder / "model.pt"
    run([console(python, "nmt-import-fairseq"), "data", "--path", str(PEER / "data-bin"), "--output", str(data),
         "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", str(PEER / "bpe.codes")])
    run([console(python, "nmt-import-fairseq"), "checkpoint", "--path", str(PEER / "checkpoint_best.pt"),
         "--data", str(data), "--output", str(ckpt)])
    return data, ckpt


def decode_speed(python: str, data: Path, ckpt: Path, bf16: bool) -> float:
    cmd = [console(python, "nmt-generate"), str(data), "--path", str(ckpt), "--beam", "5", "--batch-size", "128",
           "--quiet", *(["--bf16"] if bf16 else [])]
    m = DECODE.search(run(cmd))
    if not m:
        sys.exit("compare_installs: no speed line from nmt-generate")
    return float(m.group(1))


def train_speed(python: str, data: str, updates: int) -> dict[str, float]:
    script = checkout_of(python) / "benchmarks" / "train_throughput.py"
    out = run([python, str(script), "--data", data, "--updates", str(updates), "--no-stock"])
    return {mode: float(wps.replace(",", "")) for mode, wps in TRAIN_WPS.findall(out)}


@click.command(help=__doc__)
@click.option("--before", required=True, help="Python of the install to compare against.")
@click.option("--after", required=True, help="Python of the changed install.")
@click.option("--data", default="data-bin/multi30k_en_de", show_default=True, help="Multi30k en-de data-bin.")
@click.option("--rounds", default=2, show_default=True, help="Turns each install takes.")
@click.option("--updates", default=40, show_default=True, help="Timed training updates per turn.")
def main(before: str, after: str, data: str, rounds: int, updates: int) -> None:
    installs = {"before": before, "after": after}
    results: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: import_peer(py, Path(tmp) / name) for name, py in installs.items()}
        for turn in range(rounds):
            for name, py in installs.items():
                for mode, wps in train_speed(py, data, updates).items():
                    results.setdefault((f"train {mode} wps", name), []).append(wps)
                for bf16 in (False, True):
                    speed = decode_speed(py, *models[name], bf16)
                    results.setdefault((f"beam 5 {'bf16' if bf16 else 'fp32'} sent/s", name), []).append(speed)
                print(f"turn {turn + 1}, {name}: done", flush=True)
    print(f"\n{'figure':<22} {'before':>10} {'after':>10} {'after/before':>13}   (median of {rounds} turns)")
    for figure in dict.fromkeys(f for f, _ in results):
        b, a = (statistics.median(results[(figure, n)]) for n in ("before", "after"))
        print(f"{figure:<22} {b:>10,.1f} {a:>10,.1f} {a / b:>13.3f}")


if __name__ == "__main__":
    main()
