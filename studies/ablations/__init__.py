"""The paper's Table 3 ablations at small scale: the harness (run.py and the modules it uses) and its record
(README.md, record/). Run it as ``python -m studies.ablations`` from the repository's root."""
