"""Turn parallel text into dictionaries and binarized splits that nmt-train reads.

Example (raw Multi30k, Moses tokenization, joint BPE; see docs/data-format.md):

\b
  nmt-preprocess --source-lang en --target-lang de --trainpref raw/train \\
    --validpref raw/valid --testpref raw/test --destdir data-bin/multi30k_en_de \\
    --tokenizer moses --bpe subword_nmt --bpe-merges 10000 --joined-dictionary --workers 2
"""

from nmt.cli.common import config_command
from nmt.config.preprocess import PreprocessJob
from nmt.data.text_pipeline import TEXT_PLUGIN_KINDS


def run(job: PreprocessJob) -> None:
    from nmt.data.preprocess import run_preprocess

    run_preprocess(job)


main = config_command("nmt-preprocess", PreprocessJob, run, help=__doc__, plugin_kinds=TEXT_PLUGIN_KINDS)

if __name__ == "__main__":
    main()
