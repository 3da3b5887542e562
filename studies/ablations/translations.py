"""Each run's best translation of every test sentence, kept in the record for the paired bootstrap (the checkpoints
stay where they were trained, so the translations are what lets a later run be tested against an earlier one).

They live in one RECORD/translations.tar.xz: the runs translate the same sentences, so one archive compresses them
about 11x where a file per run would 3.5x. It is rewritten, members sorted and timestamps zeroed (the same
translations give the same bytes), under the record's lock as each run adds its own. A record of an earlier version
keeps them as plain RECORD/translations/NAME.seedK.SPLIT.txt files, which are read too."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Optional

from nmt.fileio import atomic_write
from studies.ablations.job import AblationJob, record_dir
from studies.record import locked_folder

ARCHIVE = "translations.tar.xz"
PLAIN = "translations"  # the folder of plain files an earlier version wrote


def best_translations(generate_output: str) -> list[str]:
    """The detokenized best translation of each sentence (the D- lines of nmt-generate's output), in sentence
    order."""
    best = {}
    for line in generate_output.splitlines():
        if line.startswith("D-"):
            sid, _score, text = line[2:].split("\t", 2)
            best[int(sid)] = text
    return [best[i] for i in sorted(best)]


def file_name(job: AblationJob, name: str, seed: int) -> str:
    return f"{name}.seed{seed}.{job.gen_subset}.txt"


def read_archive(path: Path) -> dict[str, bytes]:
    """{member name: its bytes} of a translations archive (read in memory: nothing is extracted to disk)."""
    members = {}
    with tarfile.open(path, "r:xz") as archive:
        for member in archive.getmembers():
            extracted = archive.extractfile(member) if member.isfile() else None
            if extracted is not None:
                members[member.name] = extracted.read()
    return members


def write_archive(path: Path, members: dict[str, bytes]) -> None:
    """Write ``members`` as a tar.xz whose bytes depend on nothing but them."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", preset=6) as archive:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(members[name]), 0o644, 0
            archive.addfile(info, io.BytesIO(members[name]))
    with atomic_write(path, "wb") as f:
        f.write(buffer.getvalue())


def keep(job: AblationJob, name: str, seed: int, lines: list[str]) -> None:
    """Add a run's translations to the record's archive (replacing an earlier copy of the same run's)."""
    record = record_dir(job)
    record.mkdir(parents=True, exist_ok=True)
    with locked_folder(record):  # two runs finishing at once each add theirs
        archive = record / ARCHIVE
        members = read_archive(archive) if archive.is_file() else {}
        members[file_name(job, name, seed)] = "".join(f"{line}\n" for line in lines).encode("utf-8")
        write_archive(archive, members)


def hypotheses(job: AblationJob, name: str, seed: int) -> Optional[list[str]]:
    """A run's translations kept in the record (None: none were kept, as for runs whose figures were copied
    into the record from the docs after their machine was gone)."""
    record, file = record_dir(job), file_name(job, name, seed)
    archive = record / ARCHIVE
    if archive.is_file():
        found = read_archive(archive).get(file)
        if found is not None:
            return found.decode("utf-8").splitlines()
    plain = record / PLAIN / file
    return plain.read_text(encoding="utf-8").splitlines() if plain.is_file() else None
