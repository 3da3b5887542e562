"""Input corpus files: finding PREFIX.LANG[.gz], checking them, and cutting them into byte ranges.

Workers read their own byte range of a plain-text file (boundaries fall just after a newline),
so ``--workers N`` needs no pass that holds the corpus in memory. Gzipped input is first streamed
to a plain file in the job's temp folder.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import zlib
from pathlib import Path
from typing import IO, Callable, Generator, Iterable, Iterator

from nmt.errors import DataError, UsageError

BLOCK_BYTES = 1 << 20  # text handed to a worker's inner loop at a time (bounded memory)
BOM = b"\xef\xbb\xbf"


def find_input(prefix: str, lang: str, input_format: str, option: str) -> Path:
    """``PREFIX.LANG`` (plain) or ``PREFIX.LANG.gz``, as ``--input-format`` allows."""
    plain, gz = Path(f"{prefix}.{lang}"), Path(f"{prefix}.{lang}.gz")
    candidates = {"plain": [plain], "gz": [gz], "auto": [plain, gz]}
    if input_format not in candidates:
        raise UsageError(f"--input-format {input_format}: choose plain, gz or auto")
    for path in candidates[input_format]:
        if path.is_file():
            return path
    tried = " or ".join(str(p) for p in candidates[input_format])
    raise UsageError(f"{option} {prefix}: no input file {tried}; check the prefix and --source-lang/--target-lang")


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def as_plain_file(path: Path, tmp_dir: Path) -> Path:
    """``path`` itself when plain; else a decompressed copy in ``tmp_dir`` (streamed)."""
    if not is_gzip(path):
        return path
    out = tmp_dir / (path.name[:-3] if path.name.endswith(".gz") else path.name + ".plain")
    with open(path, "rb") as src, open(out, "wb") as dst:
        for block in gunzip_blocks(src, path):
            dst.write(block)
    return out


def gunzip_blocks(compressed: IO[bytes], shown: Path) -> Iterator[bytes]:
    """The decompressed bytes of a gzip stream in blocks; damage is reported with the file and line."""
    lines = 0
    with gzip.GzipFile(fileobj=compressed, mode="rb") as src, gzip_errors(shown, lambda: lines):
        while block := src.read(1 << 16):  # small reads: the line named on damage is close to it
            lines += block.count(b"\n")
            yield block


@contextlib.contextmanager
def gzip_errors(path: Path, lines_read: Callable[[], int]) -> Iterator[None]:
    """A damaged gzip stream (bad header, bit flip, truncation) becomes a ``DataError`` naming the file
    and the line where decompression found the damage; zlib's own error names no file."""
    try:
        yield
    except (zlib.error, EOFError, gzip.BadGzipFile) as e:
        raise DataError(f"{path}: the gzip data is damaged near line {lines_read() + 1} ({_gzip_reason(e)}); "
                        "download or copy the file again") from None


def _gzip_reason(error: BaseException) -> str:
    """What went wrong, in words that quote none of the file's bytes (BadGzipFile's message can)."""
    if isinstance(error, EOFError):
        return "the file ends early: truncated"
    if isinstance(error, zlib.error):
        return "invalid compressed data"
    return "bad gzip header or checksum"


def count_lines(path: Path) -> int:
    """Lines in a plain file; a last line without a final newline counts."""
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def check_nonempty(path: Path, shown: Path) -> None:
    if os.path.getsize(path) == 0:
        raise DataError(f"{shown}: the file is empty; give a file with one sentence per line")


def byte_ranges(path: Path, parts: int) -> list[tuple[int, int]]:
    """Cut ``path`` into at most ``parts`` ranges [start, end) that each begin at a line start."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as f:
        for k in range(1, parts):
            pos = max(size * k // parts, cuts[-1])
            f.seek(pos)
            if pos > 0:
                f.seek(pos - 1)
                if f.read(1) != b"\n":
                    f.readline()  # move to the start of the next line
            cuts.append(min(f.tell(), size))
    cuts.append(size)
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a] or [(0, size)]


def iter_text_blocks(path: Path, start: int, end: int, shown: str) -> Iterator[list[str]]:
    """Lines of bytes [start, end) of ``path`` in blocks, decoded as strict UTF-8, without the
    newline (a trailing "\\r" is dropped too). A bad byte raises ``DataError`` with a line number
    relative to ``start`` (the caller adds the lines before its range)."""
    done = 0
    with open(path, "rb") as f:
        f.seek(start)
        remaining = end - start
        carry = b""
        while remaining > 0 or carry:
            data = f.read(min(BLOCK_BYTES, remaining)) if remaining > 0 else b""
            remaining -= len(data)
            data = carry + data
            if remaining > 0:
                cut = data.rfind(b"\n") + 1
                if cut == 0:  # a line longer than a block: keep reading
                    carry = data
                    continue
                data, carry = data[:cut], data[cut:]
            else:
                carry = b""
            if start == 0 and done == 0 and data.startswith(BOM):
                data = data[len(BOM):]  # a byte-order mark is not part of the first word
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise RangeError(done + data.count(b"\n", 0, e.start) + 1, _not_utf8(shown, data[e.start])) from None
            nul = data.find(b"\x00")
            if nul >= 0:
                raise RangeError(done + data.count(b"\n", 0, nul) + 1, _has_nul(shown))
            lines = text.split("\n")
            if text.endswith("\n"):
                lines.pop()
            lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
            done += len(lines)
            yield lines


def _not_utf8(shown: str, byte: int) -> str:
    """The message (a template holding ``{line}``) for a byte that is not UTF-8."""
    return (f"{shown}: line {{line}}: not valid UTF-8 (byte 0x{byte:02x}); "
            "convert the file to UTF-8 (e.g. iconv -t UTF-8)")


def _has_nul(shown: str) -> str:
    """NUL is no text character (a binary file?), and the binarizer uses it as its line sentinel."""
    return (f"{shown}: line {{line}}: holds a NUL byte, so it is not a text file; "
            "remove the NUL bytes (e.g. tr -d '\\000')")


def decoded_lines(stream: Iterable[bytes], shown: str) -> Generator[str, None, None]:
    """The lines of a byte stream (stdin, a file) without their newline, checked like a corpus: a byte
    that is not UTF-8 or a NUL raises ``DataError`` naming ``shown`` and the line."""
    for number, raw in enumerate(stream, 1):
        if number == 1 and raw.startswith(BOM):
            raw = raw[len(BOM):]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(_not_utf8(shown, raw[e.start]).format(line=number)) from None
        if "\x00" in text:
            raise DataError(_has_nul(shown).format(line=number))
        yield text.rstrip("\n")


def read_lines(path: str | Path) -> Generator[str, None, None]:
    """:func:`decoded_lines` of a plain or gzipped file (a damaged gzip stream is named with its line)."""
    path = Path(path)
    if not is_gzip(path):
        with open(path, "rb") as f:
            yield from decoded_lines(f, str(path))
        return
    lines = 0
    with gzip.open(path, "rb") as f, gzip_errors(path, lambda: lines):
        for line in decoded_lines(f, str(path)):
            lines += 1
            yield line


class RangeError(DataError):
    """A data error at a line counted from the start of a worker's byte range; the message
    template holds ``{line}`` for the absolute line number, filled in by the caller."""

    def __init__(self, local_line: int, template: str):
        super().__init__(template)
        self.local_line = local_line
        self.template = template

    def __reduce__(self):  # picklable across worker processes
        return (RangeError, (self.local_line, self.template))
