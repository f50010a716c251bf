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
from typing import Any, Protocol

from cells import Identity


class Teardown:
    """A cleanup that is an object with a `teardown` method rather than a callable: the
    group holds the object itself (a lift instance, whose call is its node's run), not
    a bound method of it (64 bytes per instance)."""

    __slots__ = ()

    def teardown(self) -> None:
        raise NotImplementedError  # pragma: no cover


Cleanup = Callable[[], object] | Teardown


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
        self._cleanups: Cleanup | list[Cleanup] | None = None
        """None, a lone cleanup, or a list of two or more, oldest first (most groups
        hold one cleanup: a list for it cost 88 bytes per group)."""
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
        state = "cancelled" if self._cancelled else f"{len(self._listed())} cleanups"
        return f"<CancelGroup {self.label!r} {state}>"

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def hand_over(self, label: Label) -> CancelGroup:
        """A new open group named `label` holding this group's cleanups, in their order;
        this group keeps none and stays as it was (open or cancelled)."""
        moved = CancelGroup(label)
        moved._cleanups, self._cleanups = self._cleanups, None
        return moved

    def add(self, cleanup: Cleanup) -> Callable[[], None]:
        """Add a cleanup; returns a function that removes it again (if not yet run).

        On a cancelled group the cleanup runs now, and its error propagates.
        """
        if self._cancelled:
            _run(cleanup)
            return _noop
        held = self._cleanups
        if held is None:
            self._cleanups = cleanup
        elif isinstance(held, list):
            held.append(cleanup)
        else:
            self._cleanups = [held, cleanup]

        def discard() -> None:
            held = self._cleanups
            if isinstance(held, list):
                if cleanup in held:
                    held.remove(cleanup)
                    if not held:
                        self._cleanups = None
            elif held is not None and held == cleanup:
                self._cleanups = None

        return discard

    def _listed(self) -> list[Cleanup]:
        held = self._cleanups
        if held is None:
            return []
        return held if isinstance(held, list) else [held]

    def cancel(self) -> None:
        """Run every cleanup once, newest first; later calls do nothing."""
        if self._cancelled:
            return
        self._cancelled = True
        errors: list[Exception] = []
        while True:
            held = self._cleanups
            if held is None:
                break
            if isinstance(held, list):
                if not held:
                    self._cleanups = None
                    break
                cleanup = held.pop()
                if not held:
                    self._cleanups = None
            else:
                cleanup = held
                self._cleanups = None
            try:
                _run(cleanup)
            except Exception as exc:  # siblings still run
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup(f"{len(errors)} cleanups of {self.label!r} failed", errors)

    def _check(self) -> None:
        assert not (self._cancelled and self._cleanups is not None), self
        held = self._cleanups
        assert not isinstance(held, list) or len(held) >= 1, self
        listed = self._listed()
        assert len(set(map(id, listed))) == len(listed), self


def _noop() -> None:
    pass


def _run(cleanup: Cleanup) -> None:
    """Run one cleanup: a `Teardown`'s method, or the callable."""
    if isinstance(cleanup, Teardown):
        cleanup.teardown()
    else:
        cleanup()


class RemoveNode:
    """The cleanup that removes a scheduler node (or handler, with `handler=True`): a
    slotted callable, where a closure over the scheduler and the node cost about 250
    bytes per node instance."""

    __slots__ = ("handler", "node", "scheduler")

    def __init__(self, scheduler: Any, node: Any, *, handler: bool = False) -> None:
        self.scheduler = scheduler
        self.node = node
        self.handler = handler

    def __call__(self) -> None:
        if self.handler:
            self.scheduler.remove_handler(self.node)
        else:
            self.scheduler.remove(self.node)
