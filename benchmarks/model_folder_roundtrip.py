"""nmt-export round trip on the imported fairseq Multi30k model: does the model folder translate
test_2016_flickr exactly like the checkpoint + data-bin it was exported from?

For each beam size, ``nmt-generate DATA --path CKPT --gen-subset test`` is the reference; then
``nmt-generate DATA --path FOLDER`` (H- and D- lines compared) and ``nmt.load(FOLDER).translate`` over
the BPE'd test source, one sentence per line (compared with the D- lines), each print "N/1000 identical".
The data-bin and checkpoint are made with nmt-import-fairseq into a temporary folder unless given.

    python benchmarks/model_folder_roundtrip.py [--data BIN --checkpoint CKPT] [--folder DIR] [--beams 5,1]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEER = HERE.parent.parent / "shared" / "peer" / "fairseq-m30k"
LINE = re.compile(r"^([HD])-(\d+)\t(.*)$", re.M)


def run(command: str, *argv: str) -> str:
    """stdout of an installed nmt command (``nmt-import-fairseq``, ...); stops the script when it fails."""
    script = shutil.which(command) or sys.exit(f"model_folder_roundtrip: {command} is not on PATH; install nmt")
    proc = subprocess.run([script, *argv], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"model_folder_roundtrip: {command} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def lines(output: str, kind: str) -> dict[int, str]:
    """Sentence id -> the (first) ``kind`` line's text (score and hypothesis) of an nmt-generate output."""
    found: dict[int, str] = {}
    for m in LINE.finditer(output):
        if m.group(1) == kind:
            found.setdefault(int(m.group(2)), m.group(3))
    return found


def identical(got: dict[int, str], expected: dict[int, str]) -> str:
    same = sum(got.get(i) == text for i, text in expected.items())
    return f"{same}/{len(expected)} identical"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="the imported data-bin (default: import the peer's into a temporary folder)")
    ap.add_argument("--checkpoint", help="the imported checkpoint (default: import the peer's)")
    ap.add_argument("--folder", help="the model folder to check (default: nmt-export of --checkpoint)")
    ap.add_argument("--source", default=str(PEER / "test_2016_flickr.bpe.en"), help="the BPE'd test source")
    ap.add_argument("--beams", default="5,1")
    ap.add_argument("--threads", default="1")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="roundtrip.") as tmp:
        data, ckpt, folder = args.data, args.checkpoint, args.folder
        if not data or not ckpt:
            data, ckpt = f"{tmp}/bin", f"{tmp}/ours.pt"
            run("nmt-import-fairseq", "data", "--path", str(PEER / "data-bin"), "--output", data, "--source-lang", "en",
                "--target-lang", "de")
            run("nmt-import-fairseq", "checkpoint", "--path", str(PEER / "checkpoint_best.pt"), "--data", data,
                "--output", ckpt)
        if not folder:
            folder = f"{tmp}/model"
            run("nmt-export", data, "--path", ckpt, "--output", folder)
        print(f"data-bin {data}\ncheckpoint {ckpt}\nmodel folder {folder}")

        import nmt

        model = nmt.load(folder, threads=int(args.threads))
        source = Path(args.source).read_text(encoding="utf-8").splitlines()
        for beam in args.beams.split(","):
            options = ["--gen-subset", "test", "--beam", beam, "--threads", args.threads]
            reference = run("nmt-generate", data, "--path", ckpt, *options)
            exported = run("nmt-generate", data, "--path", folder, *options)
            print(f"beam {beam}: nmt-generate --path FOLDER vs --path CKPT: H- lines "
                  f"{identical(lines(exported, 'H'), lines(reference, 'H'))}, D- lines "
                  f"{identical(lines(exported, 'D'), lines(reference, 'D'))}")
            start = time.perf_counter()
            translated = model.translate(source, beam=int(beam))
            seconds = time.perf_counter() - start
            expected = {i: text.split("\t", 1)[1] for i, text in lines(reference, "D").items()}
            print(f"beam {beam}: nmt.load(FOLDER).translate vs nmt-generate --path CKPT D- lines: "
                  f"{identical(dict(enumerate(translated)), expected)} ({len(source) / seconds:.1f} sentences/s)")


if __name__ == "__main__":
    main()
