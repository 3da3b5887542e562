"""A stand-in for a Dictionary where a test builds a model: its size, pad index and fingerprint are all
build_model asks of one."""

from __future__ import annotations

PAD = 1


class FakeDict:
    def __init__(self, n: int, tag: str = "x"):
        self.n, self.tag = n, tag

    def __len__(self) -> int:
        return self.n

    def pad(self) -> int:
        return PAD

    def fingerprint(self) -> str:
        return f"{self.tag}{self.n}"
