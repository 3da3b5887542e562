"""Raw text <-> model text: a tokenizer followed by a subword (BPE) model.

Plugins subclass :class:`Tokenizer` / :class:`BPE` and register with ``register_tokenizer`` /
``register_bpe``. ``nmt-preprocess`` records the pipeline in ``metadata.json`` and stores the BPE
codes in the data folder, so :func:`load_text_pipeline` rebuilds the very same pipeline later
(``nmt-generate``/``nmt-interactive`` on raw input, and undoing it on their output).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generic

from nmt.bounded_read import regular_file
from nmt.data.metadata import METADATA_FILE, read_metadata
from nmt.errors import ConfigError, DataError
from nmt.registry import OptionsT

TEXT_PLUGIN_KINDS = ("tokenizers", "bpe")  # the built-in plugin folders text processing needs


class Tokenizer(Generic[OptionsT]):
    """Splits raw text into space-separated tokens (``encode``) and joins them back (``decode``); ``cfg`` is the
    tokenizer's own options (the type argument: ``Tokenizer[MosesConfig]``)."""

    identity = False  # True when encode() only normalises whitespace: preprocess then skips the pass

    def __init__(self, cfg: OptionsT, lang: str):
        self.cfg = cfg
        self.lang = lang

    def encode(self, line: str) -> str:
        raise NotImplementedError

    def decode(self, line: str) -> str:
        raise NotImplementedError


class BPE(Generic[OptionsT]):
    """Splits tokens into subwords. ``learn`` writes the model (codes) to a file from word counts (or
    ``learn_from_text`` from the training text itself); an instance applies the codes read from that file.
    ``cfg`` is the BPE's own options (the type argument: ``BPE[SubwordNmtConfig]``)."""

    identity = False  # True for "no subwords": no codes are learned or stored
    codes_file = "bpe.codes"  # the codes' file name in a data-bin (".LANG" added when each language has its own)
    learns_from_text = False  # True: nmt-preprocess calls learn_from_text, not learn (sentence-level learners)

    def __init__(self, cfg: OptionsT, codes_path: Path | None):
        self.cfg = cfg
        self.codes_path = codes_path

    @classmethod
    def learn(cls, cfg: OptionsT, word_counts: dict[str, int], codes_path: Path) -> None:
        """Learn the subword model from ``{token: count}`` of the training text; write ``codes_path``."""
        raise NotImplementedError

    @classmethod
    def learn_from_text(cls, cfg: OptionsT, text_files: list[Path], codes_path: Path) -> None:
        """Learn the subword model from the training text (the tokenizer's output, one sentence per line,
        UTF-8 already checked; several files for joint codes); write ``codes_path``. For learners whose
        model depends on whole sentences (sampling them, or pieces across tokens), not only word counts."""
        raise NotImplementedError

    def encode(self, line: str) -> str:
        raise NotImplementedError

    def decode(self, line: str) -> str:
        raise NotImplementedError

    def continues_word(self, piece: str) -> bool:
        """Whether the word goes on after ``piece`` (subword-nmt's "Fisch@@"): a forced term may not start right
        after such a piece. False for BPEs whose pieces never glue to the next one (no subwords, or sentencepiece,
        which marks a word's start instead: a term starting with such a piece starts a word wherever it goes)."""
        return False


class TextPipeline:
    """tokenizer then BPE; ``decode`` undoes them in the reverse order."""

    def __init__(self, tokenizer: Tokenizer[Any], bpe: BPE[Any]):
        self.tokenizer = tokenizer
        self.bpe = bpe

    def encode(self, line: str) -> str:
        """Exactly what nmt-preprocess does to a line (whitespace normalised after each step)."""
        return normalize_space(self.bpe.encode(normalize_space(self.tokenizer.encode(line))))

    def decode(self, line: str) -> str:
        return self.tokenizer.decode(self.bpe.decode(line))


def normalize_space(line: str) -> str:
    """Single spaces between tokens, none at the ends (a step's output can contain no newline)."""
    return " ".join(line.split())


def codes_file_name(lang: str | None, stem: str = BPE.codes_file) -> str:
    """Where BPE codes live in a data folder: one joint file, or one per language (``stem``: the BPE
    plugin's ``codes_file``)."""
    return stem if lang is None else f"{stem}.{lang}"


def plugin_options(spec: dict[str, Any]) -> dict[str, Any]:
    """A recorded pipeline step's options: ``spec`` without the codes files metadata.json keeps beside them."""
    return {k: v for k, v in spec.items() if k != "codes"}


def build_tokenizer(spec: dict[str, Any], lang: str) -> Tokenizer[Any]:
    """Tokenizer plugin ``spec["name"]`` with its options from ``spec``, for language ``lang``."""
    from nmt.registry import TOKENIZER

    tokenizer: Tokenizer[Any] = TOKENIZER.build(spec["name"], plugin_options(spec), lang)
    return tokenizer


def build_bpe(spec: dict[str, Any], codes_path: Path | None) -> BPE[Any]:
    """BPE plugin ``spec["name"]`` with its options, applying the codes in ``codes_path``."""
    from nmt.registry import BPE as BPE_REGISTRY

    bpe: BPE[Any] = BPE_REGISTRY.build(spec["name"], plugin_options(spec), codes_path)
    return bpe


def _check_recorded_user_dir(data_dir: str | Path, pipeline: dict[str, Any]) -> None:
    """A data-bin whose tokenizer/BPE came from a --user-dir names that folder, but never imports it by
    itself (a data-bin received from someone else must not run code): the command's own --user-dir does."""
    from nmt.registry import BPE as BPE_REGISTRY, TOKENIZER

    user_dir = pipeline.get("user_dir")
    missing = [pipeline[k]["name"] for k, reg in (("tokenizer", TOKENIZER), ("bpe", BPE_REGISTRY))
               if pipeline[k]["name"] not in reg]
    if missing and user_dir:
        raise ConfigError(f"{Path(data_dir) / METADATA_FILE}: its tokenizer/BPE plugin {', '.join(missing)} came "
                          f"from --user-dir {user_dir}; pass --user-dir {user_dir} (a data-bin never imports code "
                          "by itself)")


def load_text_pipeline(data_dir: str | Path, lang: str) -> TextPipeline:
    """The tokenizer + BPE that ``nmt-preprocess`` applied to language ``lang`` of ``data_dir``."""
    from nmt.plugin_loader import load_plugins

    meta = read_metadata(data_dir)
    pipeline = meta["pipeline"]
    if lang not in meta["langs"]:
        raise DataError(f"{data_dir}: holds languages {', '.join(meta['langs'])}, not {lang!r}")
    load_plugins(None, TEXT_PLUGIN_KINDS)
    _check_recorded_user_dir(data_dir, pipeline)
    codes = pipeline["bpe"].get("codes", {}).get(lang)
    return TextPipeline(build_tokenizer(pipeline["tokenizer"], lang),
                        build_bpe(pipeline["bpe"], codes_inside(data_dir, codes, lang) if codes else None))


def codes_inside(data_dir: str | Path, name: str, lang: str) -> Path:
    """The codes file ``name`` recorded in metadata.json, which must lie inside the data-bin: no
    absolute path, no "..", no link leading out of it (metadata must not make nmt read any file)."""
    folder, relative = Path(data_dir).resolve(), Path(name)
    try:
        path = (folder / relative).resolve()
    except (OSError, RuntimeError):  # a link loop
        path = Path("/")
    if relative.is_absolute() or ".." in relative.parts or not path.is_relative_to(folder):
        raise DataError(f"{Path(data_dir) / METADATA_FILE}: the BPE codes of {lang!r} must be a file inside the "
                        "data-bin (no absolute path, no \"..\", no link out of it); re-run nmt-preprocess")
    regular_file(path, DataError, "re-run nmt-preprocess to write it again")  # a FIFO would block the read
    return path
