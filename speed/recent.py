"""Post ids a worker applied lately, so a step leaves known duplicates out before its atomic step.

Only a shortcut: the Lua step still refuses a step holding a post Redis has seen (DUP) and the
worker rebuilds it. A re-sent post usually arrives soon after its original, so remembering the
posts of recent steps leaves most duplicates out before they cost a refused script call.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class RecentIds:
    """At most `capacity` ids, the least recently added forgotten first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def known(self, ids: Iterable[str]) -> set[str]:
        """The given ids remembered as applied."""
        return {i for i in ids if i in self._ids}

    def add(self, ids: Iterable[str]) -> None:
        """Remember ids as applied (call only for a step about to be or already applied)."""
        for i in ids:
            self._ids[i] = None
            self._ids.move_to_end(i)  # seen again: kept longest
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)

    def clear(self) -> None:
        """Forget everything: after a refused or unknown step, or Redis data loss."""
        self._ids.clear()
