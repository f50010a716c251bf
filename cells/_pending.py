"""Results that arrive later, and the mailbox that delivers them.

cellweave propagates synchronously and uses the event loop only as a wake-up
source. A store's verdicts and loads arrive on a replica's `Mailbox`; the
mailbox is drained by whoever is driving: a running asyncio loop (drained via
`call_soon_threadsafe`), `Replica.pump()` (called by `settle()`), or a
synchronous waiter. `Pending` is the result handle: awaitable inside a loop,
and also inspectable (`done()`, `result()`) without one.

Invariants
- A `Pending` resolves at most once; callbacks run exactly once, in order.
- Mailbox items run in posting order, on the draining thread, never re-entrantly.
"""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from ._args import bad_arg, check_callable
from .errors import TransactionError

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The asyncio event loop running on this thread, or None; O(1).

    Does not import asyncio: no loop can run before asyncio is imported, so while
    it is absent the answer is None. This keeps `import cells` (and everything
    above it) from paying for asyncio (about 20 ms) in a program that never uses it.
    """
    module = sys.modules.get("asyncio")
    return None if module is None else module._get_running_loop()


@attrs.define(eq=False, repr=False)
class Mailbox:
    """A thread-safe FIFO of callbacks, drained on the thread that drives the replica.

    `deque.append` and `popleft` are atomic, so posting and draining take the
    lock only to schedule a drain on a loop or to wake a synchronous waiter.

    attrs (slotted, as the hand-written class was): one is made per replica, and
    `post`/`drain` read the same slots. Not a `queue.SimpleQueue` or an asyncio
    queue: a drain runs callbacks on the driving thread without a loop (a pump, a
    synchronous waiter), and an interrupted delivery goes back to the front.
    """

    _items: collections.deque[Callable[[], None]] = attrs.field(
        init=False, factory=collections.deque
    )
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    """What `_cond` waits on, taken directly (`with self._lock`) where nothing waits or is
    notified: `Condition.__enter__` and `__exit__` are Python calls (two frames per `with`,
    on every edit's post and await), the lock's own are C."""
    _cond: threading.Condition = attrs.field(
        init=False, default=attrs.Factory(lambda self: threading.Condition(self._lock), True)
    )
    _loop: asyncio.AbstractEventLoop | None = attrs.field(init=False, default=None)
    _scheduled: bool = attrs.field(init=False, default=False)
    _draining: bool = attrs.field(init=False, default=False)
    _from_loop: bool = attrs.field(init=False, default=False)
    _waiters: int = attrs.field(init=False, default=0)
    quiet: bool = attrs.field(init=False, default=False)
    """While True, a post schedules no drain on the loop: whoever set it pumps the mailbox
    (`Replica.pump`) before it hands the thread back to the loop, and then calls `wake()`
    (a scheduler's settle: the store's verdicts for the runs it sends arrive while it
    runs, and a drain queued on the loop for them found nothing left, at the cost of an
    asyncio handle and a loop turn per settle that sent anything). A synchronous waiter
    is still notified."""
    _listeners: list[Callable[[], None]] = attrs.field(init=False, factory=list)
    before_drain: Callable[[], None] | None = attrs.field(init=False, default=None)
    """Called at the start of every `drain()` (a replica sends its open commit batch)."""
    after_drain: Callable[[bool], None] | None = attrs.field(init=False, default=None)
    """Called after a `drain()` that ran something, with True when the drain was the
    loop's own callback (scheduled by a post) rather than a pump or a waiter: a
    scheduler then propagates at once, in the loop turn that delivered the items."""
    helper: Callable[[], bool] | None = attrs.field(init=False, default=None)
    """Work a synchronous waiter (`wait_for_items`) does instead of sleeping: a store
    whose writer thread would answer evaluates its queued commits on the waiting thread
    (`WriterStore._help`), sparing the hand-over to that thread and back. Returns
    whether it did any; may post to this mailbox."""

    def add_post_listener(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call `fn()` (on the posting thread) after each post; returns a remover."""
        self._listeners.append(fn)

        def remove() -> None:
            if fn in self._listeners:
                self._listeners.remove(fn)

        return remove

    def __len__(self) -> int:
        return len(self._items)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop drains are scheduled on (None: drained only by a pump or a waiter)."""
        return self._loop

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Drain on `loop` from now on (called whenever someone awaits inside a loop)."""
        if self._loop is loop and not self._items:
            return  # (attached, nothing to schedule: what the lock's block would leave)
        with self._lock:
            if self._loop is not loop:
                # (A drain queued on the loop before, if any, is not this loop's: the flag
                # would keep every post from queueing one here.)
                self._scheduled = False
            self._loop = loop
            if self._items:
                self._schedule_locked()

    def wake(self) -> None:
        """End `quiet`: a drain is scheduled on the loop for what is still queued (a post
        made while quiet, from another thread too, is seen here: it was queued before
        its poster read `quiet`)."""
        self.quiet = False
        if self._items and self._loop is not None and not self._scheduled:
            with self._lock:
                self._schedule_locked()

    def post(self, fn: Callable[[], None]) -> None:
        self._items.append(fn)
        if (self._loop is not None and not self._scheduled and not self.quiet) or self._waiters:
            with self._lock:
                self._schedule_locked()
                if self._waiters:
                    self._cond.notify_all()
        if self._listeners:
            for listener in list(self._listeners):
                listener()

    def post_front(self, fn: Callable[[], None]) -> None:
        """Queue `fn` to run before everything queued (the rest of an interrupted delivery)."""
        self._items.appendleft(fn)

    def _schedule_locked(self) -> None:
        loop = self._loop
        if loop is None or self._scheduled:
            return
        # The flag goes up *before* the drain is queued: set after, a drain running on
        # the loop in between would clear it first, and the flag would then claim a
        # drain that no one queued. Every later post would skip scheduling, and
        # whoever awaits the store would hang (a lost wake-up).
        self._scheduled = True
        if running_loop() is loop:
            # Posted on the loop's own thread (a MemoryStore's verdict, a commit made in
            # a callback): the loop is not waiting in select, so `call_soon` is enough;
            # `call_soon_threadsafe` would also write to the loop's self-pipe and wake
            # it through a system call (two per edit and pull, about 5 % of its time).
            loop.call_soon(self._drain_on_loop)
            return
        try:
            loop.call_soon_threadsafe(self._drain_on_loop)
        except RuntimeError:  # the loop was closed (asyncio.run returned): pump by hand again
            self._scheduled = False
            self._loop = None

    def _drain_on_loop(self) -> None:
        # Only here does the flag go down: it says a drain is queued on the loop, and a
        # drain by hand (a pump, an await of a pending result) leaves that one queued. Had
        # it cleared the flag, every post after it queued another: a user's edit and its
        # await queued one per edit (an asyncio handle made, then run on the next loop
        # turn to find nothing), where now one loop turn's posts share one.
        self._scheduled = False
        self._from_loop = True
        self.drain()

    def drain(self) -> int:
        """Run every queued callback in order; returns how many ran. Not re-entrant."""
        if not self._items and self.before_drain is None:
            # Nothing to run and nothing to send first (a pump or a loop callback that
            # finds it empty: about three per edit of the `lists edit` rows): what the
            # path below leaves, with none of its steps.
            self._from_loop = False
            return 0
        from_loop, self._from_loop = self._from_loop, False
        if self._draining:
            return 0
        before = self.before_drain
        if before is not None:
            before()
        self._draining = True
        ran = 0
        items = self._items
        try:
            while items:
                try:
                    fn = items.popleft()
                except IndexError:
                    break
                fn()
                ran += 1
        finally:
            self._draining = False
        if items and self._loop is not None:
            # Posted from another thread while we were finishing: make sure it is seen.
            with self._lock:
                self._schedule_locked()
        after = self.after_drain
        if ran and after is not None:
            after(from_loop)
        return ran

    def wait_for_items(self, timeout: float) -> bool:
        """Block until something is queued (for synchronous waiters). False on timeout."""
        helper = self.helper
        if helper is not None and not self._items and helper():
            return True
        with self._cond:
            if self._items:
                return True
            self._waiters += 1
            try:
                return self._cond.wait_for(lambda: bool(self._items), timeout)
            finally:
                self._waiters -= 1


class Pending(Generic[T]):
    """A value that arrives later: `await` it inside a loop, or check `done()` / `result()`.

    Not a library future: an `asyncio.Future` needs a loop and runs its callbacks
    through `call_soon`, where a commit's settle must run them at once, with or
    without a loop; a `concurrent.futures.Future` makes a `Condition` per result
    (measured: about 5.7x the cost of making, resolving and reading one of these,
    and one is made per commit). Hand-written slots, not attrs: attrs' `__init__`
    measured slower for this per-commit object.
    """

    __slots__ = ("_callbacks", "_done", "_error", "_mailbox", "_value")

    def __init__(self, mailbox: Mailbox | None = None) -> None:
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None
        # Made at the first callback: most results (a commit's) are read, not called back.
        self._callbacks: list[Callable[[Pending[T]], None]] | None = None
        self._mailbox = mailbox

    def __repr__(self) -> str:
        if not self._done:
            return "<Pending>"
        if self._error is not None:
            return f"<Pending error={self._error!r}>"
        return f"<Pending value={self._value!r}>"

    def done(self) -> bool:
        return self._done

    def result(self) -> T:
        """The value; raises its error. Drains the mailbox first if not done yet."""
        if not self._done and self._mailbox is not None:
            self._mailbox.drain()
        if not self._done:
            raise TransactionError(
                "result is not available yet: it waits on the store (a held gate, or an"
                " asynchronous store); await it, or call wait()"
            )
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def wait(self, timeout: float = 30.0) -> T:
        """Block the calling thread until resolved (drains the mailbox meanwhile).

        For plain scripts. Raises `TimeoutError` after `timeout` seconds, for
        example when a test gate holds the verdict.
        """
        import time

        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise bad_arg(timeout, where="Pending.wait()", name="timeout", accepts="seconds")
        deadline = time.monotonic() + timeout
        while not self._done:
            if self._mailbox is None:
                break
            self._mailbox.drain()
            if self._done:
                break
            left = deadline - time.monotonic()
            got = left > 0 and self._mailbox.wait_for_items(min(left, 0.05))
            if not got and time.monotonic() >= deadline:
                raise TimeoutError(f"still pending after {timeout} s")
        return self.result()

    def add_done_callback(self, fn: Callable[[Pending[T]], None]) -> None:
        check_callable(fn, where="Pending.add_done_callback()", name="fn")
        if self._done:
            fn(self)
        elif self._callbacks is None:
            self._callbacks = [fn]
        else:
            self._callbacks.append(fn)

    def _resolve(self, value: T) -> None:
        if self._done:
            raise TransactionError("a Pending result was resolved twice (this is a bug)")
        # (`_finish`, inlined: every commit's result is resolved here.)
        self._done = True
        self._value = value
        callbacks = self._callbacks
        if callbacks is not None:
            self._callbacks = None
            for fn in callbacks:
                fn(self)

    def _fail(self, error: BaseException) -> None:
        self._finish(None, error)

    def set_result(self, value: T) -> None:
        """Resolve with `value`. For the code that made this `Pending` (as with
        `asyncio.Future.set_result`); a second resolve raises `TransactionError`."""
        self._resolve(value)

    def set_exception(self, error: BaseException) -> None:
        """Resolve with `error` (awaiting, `wait()` and `result()` raise it). For the
        code that made this `Pending`; a second resolve raises `TransactionError`."""
        self._finish(None, error)

    def _finish(self, value: T | None, error: BaseException | None) -> None:
        if self._done:
            raise TransactionError("a Pending result was resolved twice (this is a bug)")
        self._done = True
        self._value = value
        self._error = error
        callbacks = self._callbacks
        if callbacks is not None:
            self._callbacks = None
            for fn in callbacks:
                fn(self)

    def __await__(self) -> Generator[Any, None, T]:
        if not self._done:
            import asyncio  # loaded already: a Pending is awaited inside a running loop

            loop = asyncio.get_running_loop()
            if self._mailbox is not None:
                self._mailbox.attach(loop)
                self._mailbox.drain()
            if not self._done:
                fut: asyncio.Future[None] = loop.create_future()
                loop_thread = threading.get_ident()  # __await__ runs on the loop's thread

                def wake(_: Pending[T]) -> None:
                    def set_result() -> None:
                        if not fut.done():
                            fut.set_result(None)

                    if threading.get_ident() == loop_thread:
                        set_result()
                    else:
                        loop.call_soon_threadsafe(set_result)

                self.add_done_callback(wake)
                yield from fut.__await__()
        return self.result()
