"""Config of `nmt-preprocess`: raw (or tokenized) parallel text -> dictionaries + binarized splits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from nmt.config.common import CommonConfig
from nmt.fields import opt, plugin_group

G_IO = "input and output"
G_DICT = "dictionary"
G_TEXT = "text pipeline"


@dataclass
class PreprocessConfig:
    source_lang: Optional[str] = opt(None, "Source language suffix of the input files (e.g. en).", group=G_IO)
    target_lang: Optional[str] = opt(None, "Target language suffix of the input files (e.g. de).", group=G_IO)
    trainpref: Optional[str] = opt(None, "Training files prefix: PREFIX.LANG (or PREFIX.LANG.gz).", group=G_IO)
    validpref: Optional[str] = opt(None, "Validation files prefix(es), comma-separated: valid, valid1, ...",
                                   group=G_IO)
    testpref: Optional[str] = opt(None, "Test files prefix(es), comma-separated: test, test1, ...", group=G_IO)
    destdir: str = opt("data-bin", "Output folder (written beside it first, then renamed into place).",
                       group=G_IO)
    input_format: str = opt("auto", "Input compression: plain, gz, or auto (detect PREFIX.LANG or .gz).",
                            choices=["auto", "plain", "gz"], group=G_IO)
    overwrite: bool = opt(False, "Replace a destdir that holds an earlier data-bin written by nmt-preprocess (only "
                                 "its own files; any other folder is refused).", group=G_IO)
    workers: int = opt(1, "Processes to split the work over (output identical to --workers 1).", low=1, group=G_IO)
    num_shards: int = opt(1, "Write N data-bins DESTDIR/shard0 ... shard{N-1} with the same dictionaries, the training "
                                 "sentences dealt round-robin, valid/test in shard0 only; train on "
                                 "DESTDIR/shard0:DESTDIR/shard1:... (1 = one data-bin in DESTDIR).", low=1, group=G_IO)
    keep_text: bool = opt(False, "Also keep the tokenized+BPE text of each split in DESTDIR/text/.", group=G_IO)

    joined_dictionary: bool = opt(False, "One dictionary for both languages (and joint BPE codes).", group=G_DICT)
    srcdict: Optional[str] = opt(None, "Reuse this source dictionary instead of building one.", group=G_DICT)
    tgtdict: Optional[str] = opt(None, "Reuse this target dictionary instead of building one.", group=G_DICT)
    thresholdsrc: int = opt(0, "Map source words seen fewer than this many times to <unk>.", low=0, group=G_DICT)
    thresholdtgt: int = opt(0, "Map target words seen fewer than this many times to <unk>.", low=0, group=G_DICT)
    nwordssrc: int = opt(-1, "Keep at most this many source symbols, the 4 specials included (-1: all).",
                         low=-1, group=G_DICT)
    nwordstgt: int = opt(-1, "Keep at most this many target symbols, the 4 specials included (-1: all).",
                         low=-1, group=G_DICT)

    tokenizer: Dict[str, Any] = plugin_group("tokenizer", "space", "Tokenizer applied to the raw text.", group=G_TEXT)
    bpe: Dict[str, Any] = plugin_group("bpe", "none", "Subword model, learned on the training split only.",
                                       group=G_TEXT)


@dataclass
class PreprocessJob:
    """The whole `nmt-preprocess` command: shared options + preprocessing options."""

    common: CommonConfig = field(default_factory=CommonConfig)
    preprocess: PreprocessConfig = field(default_factory=PreprocessConfig)


@dataclass
class PrepareConfig:
    dataset: Optional[str] = opt(None, "The corpus to prepare (positional): multi30k.", cli=False)
    dest: Optional[str] = opt(None, "Output folder for the raw text files, e.g. raw/multi30k.")
    from_dir: Optional[str] = opt(None, "Use the files in this local folder instead of downloading them "
                                        "(also: env var NMT_MULTI30K_DIR).", flag="--from")
    overwrite: bool = opt(False, "Prepare again even when --dest already holds the prepared files.")


@dataclass
class PrepareJob:
    """The `nmt-prepare` command."""

    common: CommonConfig = field(default_factory=CommonConfig)
    prepare: PrepareConfig = field(default_factory=PrepareConfig)
