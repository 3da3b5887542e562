"""Training epochs over sharded data: epoch k iterates the batches of data shard ``(k - 1) mod n``.

A wrapper around :class:`EpochBatchIterator` (which deals one shard's batches to the ranks): it
opens a shard when the first epoch that reads it starts and drops the previous one, so only one
shard's index and batch plan is ever held. Its state adds to the inner ``(epoch, offset)`` the shard
it is on and how many there are; a resume with the same DATA continues exactly where it stopped,
and a resume mid-epoch with another number of shards is refused (the saved offset would point into
another shard's batches).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from nmt.data.data_shards import train_shard_index
from nmt.data.epoch_iterator import EpochBatchIterator
from nmt.errors import DataError


class ShardEpochIterator:
    """The epoch iterator nmt-train uses: ``open_shard(k, epoch)`` builds the inner iterator of shard
    ``k`` positioned at the start of ``epoch``. With one shard it is the inner iterator throughout."""

    def __init__(self, num_data_shards: int, open_shard: Callable[[int, int], EpochBatchIterator]):
        self.num_data_shards = int(num_data_shards)
        self._open_shard = open_shard
        self._shard = 0
        self._inner: EpochBatchIterator | None = None

    @property
    def data_shard(self) -> int:
        """The data shard the current epoch reads."""
        return self._shard

    @property
    def inner(self) -> EpochBatchIterator:
        """The current shard's iterator (opened on first use)."""
        if self._inner is None:
            self._inner = self._open_shard(self._shard, 1)
        return self._inner

    @property
    def epoch(self) -> int:
        return self.inner.epoch

    @property
    def offset(self) -> int:
        return self.inner.offset

    def __len__(self) -> int:
        """This rank's batches in the current epoch (shards may differ in size)."""
        return len(self.inner)

    def end_of_epoch(self) -> bool:
        return self.inner.end_of_epoch()

    def _move_to(self, epoch: int, offset: int) -> None:
        """Position at (epoch, offset), opening that epoch's shard when it is another one."""
        shard = train_shard_index(epoch, self.num_data_shards)
        if self._inner is None or shard != self._shard:
            self._inner = None  # drop the previous shard before opening the next
            self._shard = shard
            self._inner = self._open_shard(shard, epoch)
        self._inner.load_state_dict({"epoch": epoch, "offset": offset})

    def next_epoch_itr(self) -> Iterator[Any]:
        """The rest of the current epoch, or the next epoch (on its shard) when this one is done."""
        if self.inner.end_of_epoch():
            self._move_to(self.inner.epoch + 1, 0)
        return self.inner.next_epoch_itr()

    def state_dict(self) -> dict[str, Any]:
        inner = self.inner
        return {**inner.state_dict(), "data_shard": self._shard, "data_shards": self.num_data_shards,
                "end_of_epoch": inner.end_of_epoch()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        epoch, offset = int(state["epoch"]), int(state.get("offset", 0))
        saved = int(state.get("data_shards", 1))  # checkpoints from before sharding read one data-bin
        mid_epoch = offset > 0 and not state.get("end_of_epoch", False)
        if saved != self.num_data_shards and mid_epoch:
            raise DataError(f"the checkpoint stopped inside epoch {epoch} reading data shard "
                            f"{state.get('data_shard', 0)} of {saved}, but DATA now has {self.num_data_shards}; "
                            "resume with the DATA of that run, or add --reset-dataloader to start a fresh epoch")
        self._move_to(epoch, offset)
        if state.get("end_of_epoch", False):  # done, whatever the size of this epoch's shard now
            self.inner.load_state_dict({"epoch": epoch, "offset": len(self.inner)})
