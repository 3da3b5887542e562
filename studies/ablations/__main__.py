"""python -m studies.ablations: the ablation study's command line (studies/ablations/run.py)."""

from studies.ablations.run import main

main()
