"""The best setting on valid, and the search's one look at the test split with it (a later winner's look is added,
the earlier kept, so that every look at the test split stays on record)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nmt.errors import NmtError
from studies.recipes.candidates import CANDIDATES
from studies.recipes.job import RecipeJob
from studies.recipes.scoring import bleu
from studies.record import Table


def candidates_run(table: Table) -> list[str]:
    """The candidates in the record, in the order they were run (whatever this run's --candidates)."""
    return [key for key in table.runs if key in CANDIDATES]


def best_setting(table: Table) -> tuple[str, str, float]:
    """(candidate, "checkpoint/lenpen", valid BLEU) of the best scored setting in the record."""
    found = [(name, setting, score) for name in candidates_run(table)
             for setting, score in table.runs[name]["valid_bleu"].items()]
    return max(found, key=lambda f: f[2])


def translate_test(job: RecipeJob, table: Table) -> None:
    """Translate the test split with the best setting on valid of every candidate in the record (not only
    those of this --candidates), unless the record's test is of that setting already. A test made for an
    earlier best (a candidate run later won on valid) stays in the record as test_earlier (then
    test_earlier_2, ...): every look at the test split is kept."""
    name, setting, score = best_setting(table)
    done = table.get("test")
    if done is not None and (done["candidate"], done["setting"]) == (name, setting):
        return
    kind, lenpen = setting.split("/lenpen ")
    paths = [Path(p) for p in table.get(name)["checkpoints"][kind]]  # type: ignore[index]
    if not all(p.is_file() for p in paths):
        raise NmtError(f"--test: the checkpoints of the best setting on valid ({name}, {setting}) are gone "
                       f"({paths[0]}); train {name} again (remove its run from {table.path}) to test it")
    test_bleu = bleu(job, paths, job.test_subset, lenpen, Path(job.out_dir) / name / f"test-{kind}-{lenpen}")
    if done is not None:
        key = earlier_test_key(len(earlier_tests(table)) + 1)
        table.add(key, {**done, "variant": key})
    table.add("test", {"variant": "test", "seed": 1, "candidate": name, "setting": setting, "valid_bleu": score,
                       "test_bleu": test_bleu})


def earlier_test_key(n: int) -> str:
    """The record's key of the n-th test superseded by a later best on valid."""
    return "test_earlier" if n == 1 else f"test_earlier_{n}"


def earlier_tests(table: Table) -> list[dict[str, Any]]:
    """The superseded tests, oldest first."""
    found: list[dict[str, Any]] = []
    while (earlier := table.get(earlier_test_key(len(found) + 1))) is not None:
        found.append(earlier)
    return found
