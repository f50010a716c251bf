"""`Sent`: what `rt.send()` returns — the handle of one event's handling.

Sending is fire-and-forget: nothing needs to hold or await the handle, and an
unawaited handle warns about nothing (it is a plain object, not a coroutine).
Awaiting it drives the runtime (as `idle()` does) until the event is settled
and gives the outcome: "done" (the handler ran and its transaction committed)
or "dropped" (it was not handled here: a duplicate of an event already
handled, the handler aborted its own transaction, the handler went away, or
the runtime closed before it was handled); it raises the handling's error
when it failed: `HandlerError` (the handler's exception its cause),
`CommitConvergenceError`, or the `CellweaveError` of a send that waited for
its result to start and could not be delivered. An event a served runtime
(`pages="served"`) records for a page another process runs goes parked ->
queued (recorded in the store) -> done | dropped | failed, as that process
reports it; a failure there raises `RemoteHandlingError` with its message.

Invariants
- `status` moves forward only: parked -> queued -> dispatched -> done | dropped
  | failed (a stale-basis retry goes back to queued once per attempt, never
  after an end); "parked" only while no event is bound.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, Final, Literal

from cells import CellweaveError
from scheduler import QueuedEvent

if TYPE_CHECKING:
    import asyncio  # at run time imported where used: `import runner` stays cheap

Outcome = Literal["done", "dropped"]
_ENDS: Final = ("done", "dropped", "failed")


class Sent:
    """The handle of a sent event; `await` it for the handling's outcome."""

    __slots__ = (
        "_closed",
        "_event",
        "_failure",
        "_idle",
        "_remote_error",
        "_remote_status",
        "_waiters",
    )

    def __init__(self, idle: Callable[[], Awaitable[None]], closed: Callable[[], bool]) -> None:
        self._idle = idle
        self._closed = closed
        self._event: QueuedEvent | None = None
        self._failure: BaseException | None = None
        """Why a parked send was never queued (its result did not start, or bound no
        handler there)."""
        self._waiters: list[asyncio.Future[None]] | None = None
        self._remote_status: str | None = None
        """For an event recorded for a page another process runs: its status as this
        process last heard it (its `_event` stays None)."""
        self._remote_error: BaseException | None = None

    def __repr__(self) -> str:
        ev = self._event
        name = "parked" if ev is None else ev.id[:12]
        return f"<Sent {name} {self.status}>"

    def _bind(self, event: QueuedEvent) -> None:
        self._event = event

    def _settled(self, event: QueuedEvent) -> None:
        """The event's `on_settle` (it may come before `_bind`: an event dropped at
        once): wakes whoever awaits this handle."""
        self._event = event
        if event.status in _ENDS:
            self._wake()

    def _fail(self, error: BaseException) -> None:
        """A parked send that will never be queued."""
        self._failure = error
        self._wake()

    def _remote(self, status: str, error: str | None = None) -> None:
        """An event handled in another process: its status as heard here."""
        self._remote_status = status
        if error is not None:
            self._remote_error = CellweaveError(error)
        if status in _ENDS:
            self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, None
        for fut in waiters or ():
            if not fut.done():
                fut.set_result(None)

    @property
    def event_id(self) -> str | None:
        """The event's id once it is queued (None while parked behind a start)."""
        return None if self._event is None else self._event.id

    @property
    def status(self) -> str:
        """ "parked" (waiting for its result to start), "queued", "dispatched",
        "done", "dropped" or "failed"."""
        if self._failure is not None:
            return "failed"
        if self._remote_status is not None:
            return self._remote_status
        return "parked" if self._event is None else self._event.status

    @property
    def error(self) -> BaseException | None:
        """Why it failed or was dropped, once it has; else None."""
        if self._failure is not None:
            return self._failure
        if self._remote_error is not None:
            return self._remote_error
        return None if self._event is None else self._event.error

    def done(self) -> bool:
        return self.status in _ENDS

    def outcome(self) -> Outcome:
        """The outcome of a settled event ("done" / "dropped"); raises its error if it
        failed, and `asyncio.InvalidStateError` if it is not settled yet."""
        status = self.status
        if status == "failed":
            error = self.error
            assert error is not None
            raise error
        if status == "done":
            return "done"
        if status == "dropped":
            return "dropped"
        import asyncio

        raise asyncio.InvalidStateError(f"{self!r} is not settled yet")

    def __await__(self) -> Generator[Any, None, Outcome]:
        return self._wait().__await__()

    async def _wait(self) -> Outcome:
        import asyncio  # loaded: this coroutine runs on a loop

        # Drive the runtime until the event is settled; an event that still waits after
        # that (on the commit of the transaction that sent it) is waited for.
        # It stops waiting as soon as its event settles: an async handler of another
        # stream, still running, is not this handle's to wait for.
        while not self.done():
            if self._closed():
                raise CellweaveError(f"{self!r}: the runtime closed before its handling settled")
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if self._waiters is None:
                self._waiters = []
            self._waiters.append(fut)
            idle = asyncio.ensure_future(self._idle())
            try:
                await asyncio.wait((idle, fut), return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not idle.done():
                    idle.cancel()
            if idle.done() and not idle.cancelled():
                idle.result()  # (raises what the idle raised)
            if self.done():
                break
            await fut
        return self.outcome()


# What the runtime's sends do to a handle (the handle's state is this module's own):


def bind_event(sent: Sent, event: QueuedEvent) -> None:
    """`sent` is the handle of the queued `event` from now on."""
    sent._bind(event)


def settle_hook(sent: Sent) -> Callable[[QueuedEvent], None]:
    """The `on_settle` callback of `sent`'s event: wakes whoever awaits the handle."""
    return sent._settled


def fail_parked(sent: Sent, error: BaseException) -> None:
    """A parked send that will never be queued: `sent` fails with `error`."""
    sent._fail(error)
