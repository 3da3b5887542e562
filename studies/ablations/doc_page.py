"""The study's table inside a Markdown page (the study's README.md), between two comment lines, so that the page
always shows the table its record makes."""

from __future__ import annotations

from nmt.errors import UsageError

# the lines of a --doc page between which the table goes
DOC_BEGIN = "<!-- ablations table: written by python -m studies.ablations --doc -->"
DOC_END = "<!-- /ablations table -->"


def with_table(doc: str, table_text: str, path: str) -> str:
    """``doc`` with the lines between its table markers replaced by ``table_text``."""
    begin, end = doc.find(DOC_BEGIN + "\n"), doc.find("\n" + DOC_END)
    if begin < 0 or end < begin:
        raise UsageError(f"--doc {path}: no '{DOC_BEGIN}' line followed by a '{DOC_END}' line; add the two lines where "
                         "the table goes")
    return doc[:begin + len(DOC_BEGIN) + 1] + table_text.rstrip("\n") + doc[end:]
