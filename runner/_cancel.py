"""Latched cancel groups: the cleanup bag behind every registration.

A group collects cleanups while it is open. `cancel()` runs each exactly once
(newest first, like a stack of context managers) and latches: cancelling
again does nothing, and a cleanup added after cancellation runs at once. The
latch closes the "parent stopped, then a late retry adds a child" window:
that child is cancelled the moment it is added. One failing cleanup does not
skip its siblings; failures are raised together once all have run.

Invariants (checked by `_check`)
- a cancelled group holds no cleanups; an open group holds each at most once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from cells import Identity

Cleanup = Callable[[], object]


class Labelled(Protocol):
    """An owner that names its group when asked (a registration: "key#generation")."""

    def group_label(self) -> str: ...


Label = str | Identity | Labelled
"""What a group is named by: a str, an identity (its instance: "principal/session"),
or its owner. Formatted only when shown (a repr, an error): a formatted key per group
cost about 150 bytes per registration."""


class CancelGroup:
    __slots__ = ("_cancelled", "_cleanups", "_label")

    def __init__(self, label: Label = "") -> None:
        self._label = label
        self._cleanups: list[Cleanup] = []
        self._cancelled = False

    @property
    def label(self) -> str:
        label = self._label
        if isinstance(label, str):
            return label
        if isinstance(label, Identity):
            return f"{label.principal}/{label.session}"
        return label.group_label()

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else f"{len(self._cleanups)} cleanups"
        return f"<CancelGroup {self.label!r} {state}>"

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def add(self, cleanup: Cleanup) -> Callable[[], None]:
        """Add a cleanup; returns a function that removes it again (if not yet run).

        On a cancelled group the cleanup runs now, and its error propagates.
        """
        if self._cancelled:
            cleanup()
            return _noop
        self._cleanups.append(cleanup)

        def discard() -> None:
            if cleanup in self._cleanups:
                self._cleanups.remove(cleanup)

        return discard

    def cancel(self) -> None:
        """Run every cleanup once, newest first; later calls do nothing."""
        if self._cancelled:
            return
        self._cancelled = True
        errors: list[Exception] = []
        while self._cleanups:
            cleanup = self._cleanups.pop()
            try:
                cleanup()
            except Exception as exc:  # siblings still run
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup(f"{len(errors)} cleanups of {self.label!r} failed", errors)

    def _check(self) -> None:
        assert not (self._cancelled and self._cleanups), self
        assert len(set(map(id, self._cleanups))) == len(self._cleanups), self


def _noop() -> None:
    pass
