"""python -m studies.recipes: the recipe search's command line (studies/recipes/run.py)."""

from studies.recipes.run import main

main()
