"""The output folder of nmt-preprocess: recognising a finished job, and replacing the folder
in one rename so that it never holds half of a run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from nmt.errors import UsageError


def job_fingerprint(options: dict[str, Any], inputs: list[Path], user_dir: str | None) -> str:
    """What determines the output: the options that change it and the input files (path, size,
    mtime), so a rerun of the same job can be recognised without reading the data."""
    files = {}
    for path in inputs:
        st = path.stat()
        files[str(path.resolve())] = [st.st_size, st.st_mtime_ns]
    blob = json.dumps({"options": options, "files": files, "user_dir": user_dir}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def destdir_state(destdir: Path, fingerprint: str, overwrite: bool) -> str:
    """"new", "same" (already done with these inputs) or "replace"; refuses other data."""
    if not destdir.exists():
        return "new"
    if not destdir.is_dir():
        raise UsageError(f"--destdir {destdir}: exists and is not a folder; choose another --destdir")
    if not any(destdir.iterdir()):
        return "new"
    meta_path = destdir / "metadata.json"
    try:
        same = json.loads(meta_path.read_text(encoding="utf-8")).get("job_fingerprint") == fingerprint
    except (OSError, ValueError):
        same = False
    if same and not overwrite:
        return "same"
    if not overwrite:
        raise UsageError(f"--destdir {destdir}: already holds different data; pass --overwrite to replace it "
                         "or choose another --destdir")
    return "replace"


def new_temp_dir(destdir: Path) -> Path:
    """A private folder beside ``destdir`` (same file system, so the final rename is atomic)."""
    destdir.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{destdir.name}.tmp-", dir=destdir.parent))


def move_into_place(tmp: Path, destdir: Path, state: str) -> None:
    """Rename the finished temp folder to ``destdir`` (replacing the old one when asked)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the result is an ordinary folder
    if destdir.exists() and state == "new":
        destdir.rmdir()  # an empty folder
    old = None
    if state == "replace":
        old = destdir.with_name(f".{destdir.name}.old-{os.getpid()}")
        os.replace(destdir, old)
    os.replace(tmp, destdir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def metadata_languages(data: str | Path, source_lang: str | None,
                       target_lang: str | None) -> tuple[str, str] | None:
    """The given languages, the missing ones read from the data-bin's metadata.json; None when
    one is missing and there is no metadata.json to read it from."""
    if source_lang and target_lang:
        return source_lang, target_lang
    meta = Path(data) / "metadata.json"
    if not meta.is_file():
        return None
    info = json.loads(meta.read_text(encoding="utf-8"))
    return source_lang or info["source_lang"], target_lang or info["target_lang"]


def resolve_langs(data: str | Path | None, source_lang: str | None, target_lang: str | None) -> tuple[str, str]:
    """--source-lang / --target-lang, or the pair recorded in the data-bin's metadata.json."""
    if not data or not Path(data).is_dir():
        raise UsageError(f"data-bin folder {data or '(none)'}: no such folder; give the folder nmt-preprocess "
                         "wrote, e.g. nmt-train data-bin/multi30k_en_de")
    langs = metadata_languages(data, source_lang, target_lang)
    if langs is not None:
        return langs
    raise UsageError(f"{data}: no metadata.json to read the languages from; pass --source-lang and --target-lang")
