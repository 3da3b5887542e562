"""The search for the best Multi30k recipe for a training-time budget: the harness (run.py and the modules it uses)
and its record (README.md, record/). Run it as ``python -m studies.recipes`` from the repository's root."""
