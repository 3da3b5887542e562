"""Studies: experiments whose record is the product (the paper's ablations, the recipe search).

Each study is a package run from the repository's root (``python -m studies.ablations``,
``python -m studies.recipes``); studies/README.md says how a study differs from an example and a benchmark."""
