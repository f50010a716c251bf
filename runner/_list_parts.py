"""The parts of a filter's or flat_map's output, one per element, in list order.

A combiner (`_list_combine`) keeps, per element of the elements document, the
part of the output it wrote for it (a `Slot`). Two questions must stay cheap
at any N: where one element's part starts in the output (an element's result
changed), and which slots a splice of the elements document removes and where
the inserted ones go (an element inserted or removed). A flat list of slots
answers the second by position but would renumber every later slot on each
splice (O(N) Python work), so the slots live in blocks of at most
`2 * BLOCK` (a blocked list): a slot knows its block; each block's slot count
and part-length total sit in two flat lists summed at C speed.

Complexity: `start` and `locate` are O(N / BLOCK) C-level sums and index
scans plus O(BLOCK) C-level work in one block; `splice` is O(changed) Python
steps plus that; `resize` O(BLOCK) C-level. Nothing walks the slots in Python
except `_check`.

Invariants (checked by `_check`)
- `counts[k]` and `totals[k]` are block k's slot count and part-length sum;
- every slot's `block` is the block holding it, `lengths[j]` its part's length;
- no block is empty, none holds more than `2 * BLOCK` slots;
- `size` is the number of slots.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import Any

from cells import DocKey, Path

BLOCK = 64
"""Slots per block after a split (a block splits past twice this)."""

ReadEntry = tuple[DocKey, Path, bool]
"""One read made to reach an element's result: document, path, shallow."""


class Slot:
    """One element's part of the output: its pair `[child, element]` (the elements
    document's object), its part, and what reading its result read."""

    __slots__ = ("block", "pair", "part", "reads")

    def __init__(self, pair: list[Any], part: list[Any], reads: tuple[ReadEntry, ...]) -> None:
        self.pair = pair
        self.part = part
        self.reads = reads
        self.block: Block | None = None

    def __repr__(self) -> str:
        return f"Slot({self.pair!r}, {self.part!r})"


class Block:
    """Consecutive slots and their parts' lengths (parallel lists)."""

    __slots__ = ("lengths", "slots")

    def __init__(self, slots: list[Slot]) -> None:
        self.slots = slots
        self.lengths = [len(s.part) for s in slots]
        for s in slots:
            s.block = self


class Parts:
    """The slots of one combination, in list order (a blocked list; see the module)."""

    __slots__ = ("blocks", "counts", "size", "totals")

    def __init__(self, slots: list[Slot]) -> None:
        self.blocks: list[Block] = []
        self.counts: list[int] = []
        self.totals: list[int] = []
        self.size = 0
        self._put(0, slots)

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Any:
        for block in self.blocks:
            yield from block.slots

    # ------------------------------------------------------------------ positions
    def locate(self, position: int) -> tuple[int, int]:
        """(block index, index in it) of the slot at `position` (< `size`)."""
        ends = list(accumulate(self.counts))
        k = bisect_right(ends, position)
        return k, position - (ends[k - 1] if k else 0)

    def where(self, slot: Slot) -> tuple[int, int]:
        """(block index, index in it) of `slot`."""
        block = slot.block
        assert block is not None, slot
        return self.blocks.index(block), block.slots.index(slot)

    def start(self, k: int, j: int) -> int:
        """Where the part of the slot at (`k`, `j`) starts in the output."""
        return sum(self.totals[:k]) + sum(self.blocks[k].lengths[:j])

    def start_at(self, position: int) -> int:
        """Where the part of the slot at `position` starts (`size`: the output's length)."""
        if position >= self.size:
            return sum(self.totals)
        return self.start(*self.locate(position))

    def slots(self, position: int, count: int) -> list[Slot]:
        """The `count` slots from `position` on."""
        out: list[Slot] = []
        if not count:
            return out
        k, j = self.locate(position)
        while len(out) < count:
            out += self.blocks[k].slots[j : j + count - len(out)]
            k, j = k + 1, 0
        return out

    def resize(self, slot: Slot, k: int, j: int) -> None:
        """`slot` (at `k`, `j`) holds a new part: note its length."""
        block = self.blocks[k]
        n = len(slot.part)
        self.totals[k] += n - block.lengths[j]
        block.lengths[j] = n

    # ------------------------------------------------------------------ splices
    def splice(self, position: int, delete: int, slots: list[Slot]) -> list[Slot]:
        """Replace the `delete` slots from `position` on by `slots`; returns the removed
        ones. O(delete + len(slots)) Python steps, plus the C-level work above."""
        removed: list[Slot] = []
        while delete:
            k, j = self.locate(position)
            block = self.blocks[k]
            take = min(delete, len(block.slots) - j)
            removed += block.slots[j : j + take]
            del block.slots[j : j + take]
            self.totals[k] -= sum(block.lengths[j : j + take])
            del block.lengths[j : j + take]
            self.counts[k] -= take
            self.size -= take
            delete -= take
            if not block.slots:
                del self.blocks[k], self.counts[k], self.totals[k]
        for s in removed:
            s.block = None
        self._put(position, slots)
        return removed

    def _put(self, position: int, slots: list[Slot]) -> None:
        """Insert `slots` at `position`, splitting a block that grows past `2 * BLOCK`."""
        if not slots:
            return
        if not self.blocks:
            k, j = 0, 0
            self.blocks.append(Block([]))
            self.counts.append(0)
            self.totals.append(0)
        elif position >= self.size:
            k = len(self.blocks) - 1
            j = self.counts[k]
        else:
            k, j = self.locate(position)
        block = self.blocks[k]
        block.slots[j:j] = slots
        lengths = [len(s.part) for s in slots]
        block.lengths[j:j] = lengths
        for s in slots:
            s.block = block
        self.counts[k] += len(slots)
        self.totals[k] += sum(lengths)
        self.size += len(slots)
        if len(block.slots) > 2 * BLOCK:
            every = block.slots
            pieces = [Block(every[i : i + BLOCK]) for i in range(0, len(every), BLOCK)]
            self.blocks[k : k + 1] = pieces
            self.counts[k : k + 1] = [len(b.slots) for b in pieces]
            self.totals[k : k + 1] = [sum(b.lengths) for b in pieces]

    def _check(self) -> None:
        assert len(self.blocks) == len(self.counts) == len(self.totals), self
        n = 0
        for block, count, total in zip(self.blocks, self.counts, self.totals, strict=True):
            assert 0 < len(block.slots) == count <= 2 * BLOCK, (count, len(block.slots))
            assert block.lengths == [len(s.part) for s in block.slots], block.lengths
            assert sum(block.lengths) == total, (total, block.lengths)
            assert all(s.block is block for s in block.slots), "a slot's block"
            n += count
        assert n == self.size, (n, self.size)
