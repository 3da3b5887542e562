"""Download (or copy from a local folder) a public corpus as plain text for nmt-preprocess.

\b
  nmt-prepare multi30k --dest raw/multi30k                     # online
  nmt-prepare multi30k --dest raw/multi30k --from DIR          # offline, DIR holds train.en.gz, ...

Writes DEST/{train,valid,test}.{en,de,fr} (plain UTF-8 text, one sentence per line).
"""

from nmt.cli.common import config_command
from nmt.config.preprocess import PrepareJob


def run(job: PrepareJob) -> None:
    from nmt.data.prepare import prepare

    prepare(job.prepare)


main = config_command("nmt-prepare", PrepareJob, run, help=__doc__, arguments={"dataset": "prepare.dataset"},
                      plugin_kinds=())

if __name__ == "__main__":
    main()
