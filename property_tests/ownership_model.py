"""A reference model of the child-run ownership rules, in plain Python.

No scheduler, no storage, no runner code: documents are plain names, a
registration is a `MReg` carrying a model *token* (an int, unique over the whole
model), and the only asynchrony is a FIFO that stands for a replica's mailbox
(load answers and start settlements arrive through it, in posting order). The
machine in `test_ownership_machine.py` drives this model and a real `Runtime`
side by side and compares them after every step.

Written from `spec/runner-child-run-ownership.md` (quoted below, sentence by
sentence, each with the rule that implements it), DESIGN §4.2-4.3 (the items
that apply without list coordinators) and the start-cascade stages of
reference-runner §1.2.

Spec sentence -> model rule
---------------------------
Preamble
- "Running a pattern produces a registration ... indexed by the result's key."
  -> `RunnerModel.regs: dict[doc, MReg]`, one per result name.
- "Starting a result installs one; stopping it removes and cancels one."
  -> `_install` / `_end`.
- "The registration is not part of any transaction." -> `run` installs at once,
  before any verdict; `MTx` holds only the *callbacks* a launch registered.
- "The writes a setup stages roll back ...; the registration does not." ->
  a settle only runs callbacks (`MTx.settle`); nothing else is undone.
- "A result is also reachable from more than one place" -> the same result name
  can be launched by a parent (`_launch_child`), run (`run`), and started
  (`start`, possibly through link documents `World.links`).

Two ways a registration ends
- "An explicit stop is authoritative over the result. It ends whatever
  registration it finds, discards any lifetime the result holds" -> `stop`,
  `_stop_result` (no token check; `lifetimes.discard`).
- "and reaches starts that hold no registration yet: a start still resolving a
  link to this result terminates when it resolves." -> `stop` adds a tombstone
  to every active attempt that has not discovered the key
  (`MAttempt.tombstones`); `_current` fails once a discovered key is tombstoned.
- "A release is authoritative over the registration its own launch installed,
  and over nothing else." -> `release(doc, token)` declines on a token mismatch.
- "A pattern releases a child it launched when that pattern is torn down" ->
  `MReg.cleanups` (child, token) run newest first when the parent ends.
- "and a launch releases its own registration when the transaction staging its
  setup does not become durable." -> `_rollback` callbacks on the setup `MTx`.
- "A release leaves a replacement registration alone" -> token mismatch declines.
- "leaves a result that holds a lifetime of its own running" -> `release`
  declines when `doc in lifetimes`.
- "and leaves a start it cannot see to settle on its own terms." -> `release`
  never tombstones; it bumps only the key it ends (DESIGN §4.2: "without
  tombstoning unresolved starts").
- "Pending starts ... are the exception: a release cancels every one held for
  the result, including one another launch scheduled" -> `release` with nothing
  registered calls `_cancel_pending(doc)` (all of them); so does a release that
  ends a registration (DESIGN §4.2 gives the order: the three declines first,
  then the pending cancel when nothing is registered).

Releasing a child
- "A pattern that launches a child registers a release for it, which runs when
  the launching pattern is torn down." -> `_install` appends (child, token) to
  the parent's cleanups; `_end` runs them.
- "A list coordinator releases a child earlier than that: when the list no
  longer holds the element that child belongs to" -> observed, not re-derived:
  a reconcile is a scheduler pass, so the machine hands the model each element
  child a coordinator launched (`coordinator_installed`, launch "element") or
  released (`coordinator_released`) since the last step: the releases before the
  model's FIFO runs (a coordinator's teardown releases inside the mailbox step that
  ends its list result), the launches after it (a reconcile runs in the pass after
  the mailbox drain, so a start resumed in that drain found the child unregistered,
  and claims only when it settles; see the machine's `_observe_coordinators`).
  What the model checks
  of them: a coordinator's release never ends a child holding a lifetime (a
  violation), never touches a child a start installed (the registrations would
  differ), and at the end the element children running are exactly those the
  list holds while M0 runs (less any a stop ended since M0 started: a stop is
  authoritative) plus those holding a lifetime (a page survives its element's
  removal). A coordinator is justified as an owner while its list result runs
  (`unjustified`).
- "or when the result container changes scope. Each per-element result uses the
  container's scope ..." -> NOT MODELLED (M0 is space-scoped; no re-scoping).
- "A release stops the child's registration only when both of these hold:" /
  "The registration is the one this launch installed. A later attempt that
  replaced it owns itself, so a release that no longer recognizes what it finds
  does nothing." -> token check. A launch whose child was already running holds
  no token (None) and releases whatever is there (reference §1.1).
- "Nothing holds an independent lifetime for the result" -> lifetime decline.
- "The second condition reaches only the starts a release can see. A start that
  has not yet resolved its link to this result is indexed under no key the
  release consults, so a release cannot tell that one is in flight." ->
  `_in_flight(doc)` looks only at attempts whose `discovered` holds `doc`.
- "That release proceeds: it ends the registration its own launch installed,
  and leaves the start running." -> `release` ends and bumps `doc` only; the
  unresolved attempt has no entry for it, so it is unaffected.
- "The start may go on to install a registration of its own and claim a
  lifetime for it, by the rule below." -> the cascade installs when it finds
  nothing registered and claims at settle (`_settle`).
- "A stop of the same result instead terminates that start when it resolves."
  -> tombstones (see stop above).

List setup across serving instances
- Every sentence -> NOT MODELLED (M0's list is read by one principal). Two principals on one
  runtime are modelled only as disjoint result names (`UA.*`, `UB.*`), acting
  through their own session views.

Independent lifetimes
- "A result acquires a lifetime of its own when something starts it in its own
  right ... Runner.start." / "Navigating to a nested result opens it as a page"
  -> `start(doc)` on any result or link name, a nested child included; and
  `open_page` (DESIGN §4.2 pages, API `rt.open_page`): the record is written
  first (retried on a retryable verdict while the page is not stopped), the start
  begins once it lands, a stop before that wins (no start), a start that fails
  or claims nothing withdraws the record, unless another open of the same page is
  in flight or succeeded (this machine found that gap). A principal's stop first
  closes their pages on the result (`stop_as`: opened as that name or claimed it;
  every page of theirs on the result) and then stops what the page claimed.
- "An enclosing pattern releasing such a result leaves it running; only
  stopping it directly ends it." -> lifetime decline in `release`; only
  `_stop_result` / `stop_all` / the end of the registration drop the lifetime.
- "A start that is still resolving may be about to acquire that lifetime and
  cannot say so yet, so a release declines while one is in flight." ->
  `_in_flight` decline.
- "A start that then fails leaves the result registered until the runtime
  stops it, the same bound the scheduler accepts ..." -> superseded by DESIGN
  §4.3 item 4 (below): the declined release is remembered and applied.
- "The lifetime is claimed when the start settles" -> `_settle` runs as a FIFO
  item posted after the cascade returns, never inside `start`.
- "and only when its target is still current at that moment: no stop has
  tombstoned the target for this start or replaced the target's registration
  since this start discovered it." -> `_current_for(att, target)`: target
  discovered, not tombstoned, not bumped since discovery (`discovered[doc]`
  turns True on every `_bump`), same epoch; and the target is registered.
- "A start whose target a stop superseded while it was resolving claims
  nothing ... Such a start reports that it did not leave the piece running."
  -> `MAttempt.result = False`.
- "The judgment is about the target alone — a stop of an intermediate link doc
  ... voids neither the claim nor the report." -> `_current_for` looks at the
  target only (the whole-attempt `_current` still guards every cascade stage).

Rolling back with the transaction
- "A run stages its setup in a transaction and installs its registration
  outside one." -> `run`.
- "When that transaction does not become durable, the launch releases its
  registration" -> `_rollback(doc, token)` on every outcome but OK/STALE_BASIS,
  ABORTED included.
- "The rollback is a release rather than a stop, so it compensates the
  registration this launch installed and reaches no further. A result someone
  opened in its own right stays running, and a start still resolving is left to
  settle ..." -> `_rollback` calls `release` with the launch's token.
- "A stale basis is the exception ... that re-run reuses what is already there."
  -> STALE_BASIS runs no release and marks the registration owed if it is still
  the one installed (`MReg.owed`, DESIGN §4.3 item 2 "marks the owed writes as
  debt; the re-run re-issues them"): the next launch that finds it running
  re-issues the setup of it and every registered descendant (`_repay`), paid
  only if that transaction lands (else whatever was owed is owed again); a
  start's own transaction that goes stale re-issues at once (`_start_settled`).
  Compared with `Registration.owed` after every step.
- (the runner's own transactions) A start's install and a gated install stage
  their nested children's setups in a transaction of the runner's own
  (`_runner_tx`): "when that transaction does not become durable, the launch
  releases its registration" applies to those children (their `_rollback`s);
  the started or gated result itself is not rolled back (it was not set up in
  that transaction), so a start whose transaction fails for good keeps its
  result and its lifetime.

Commit-gated starts
- "A start gated on a commit has no registration until its callback installs
  one." -> `run(gated=True)` adds an `MPending`; its `MTx` callback installs.
- "Ownership of it begins when the start is scheduled, so stopping the result
  before that commit tombstones the pending start and the callback does not
  install it." -> `_stop_result` cancels every pending start of the key; a
  cancelled one installs nothing.
- "Releasing the child cancels the pending starts held for that result too, at
  the width the exception above describes." -> `release` (see above).
- "A launch whose child is still gated holds that child through the pending
  start and nothing else" -> a gated run's token is the pending start; a failed
  commit settles it (DESIGN §4.2 "A failed commit settles it (no leak)").

DESIGN §4.2 / §4.3 items that apply
- §4.2 stop_all -> `stop_all`: new epoch (every attempt stops at its next
  check), every pending start cancelled, every lifetime and remembered decline
  dropped, every registration ended (in installation order).
- §4.3.2 stale basis keeps, everywhere -> `_rollback`.
- §4.3.3 no orphaned lifetime -> `_end` drops the lifetime whatever ends it.
- §4.3.4 no zombie after a declined release -> `declined[doc] = (token, origin)`
  on an in-flight decline; `_settle` applies it once no attempt tracks the key
  (and `_end` forgets it when that registration goes another way). A launch that
  finds the result running adopts it (`_adopt`): it holds it tokenless
  (reference §1.1), so a release an earlier launch deferred is dropped. Checked
  property (`violations`): an applied deferred release of a launch never ends a
  child a *running* parent launched meanwhile — that parent would run without a
  child nobody stopped ("a release ... is authoritative over the registration its
  own launch installed, and over nothing else"). This machine found that bug;
  the runner fixed it in 036be3b (tests/runner/test_found_by_model.py pins it).
  The same holds for a release the installing launch makes *after* a parent's
  nested launch adopted the child (its setup's rollback): `MReg.adopted` makes
  that rollback leave the child to the adopting parent (found by the soak too).
- §4.3.7 generation fences -> `stop(doc, generation=token)`: a generation is
  unique per registration, so naming one is naming its token; a stale one does
  nothing.
- §4.3.5 (page owners), §4.3.6 (runaway nesting) -> not modelled (no page
  records, fixed finite nesting). §4.3.1 (list rollback) -> observed only (the
  coordinator's releases, see "Releasing a child").

Not modelled yet (the machine keeps them out of reach, so the comparison stays exact)
- When a list reconcile runs and what it does: the model takes each step's element
  launches and releases from the runtime (see "Releasing a child"), so a
  coordinator bug that is consistent within a step is caught only by the end-state
  check. Filter and flat_map, inline (position-keyed) elements, re-scoping, per-
  resolution-identity bookkeeping (one principal's list), a reconcile's own
  transaction held and rejected (it is accepted whenever verdicts are released).
- The re-issue transaction of a start whose transaction went stale: the model
  clears the debt when it is issued, like the runner, and never learns its verdict
  (the machine never holds it on purpose; released verdicts accept it).
- Handlers, event-launched children and lineage, navigation from a handler,
  computation-produced children, runaway nesting (§4.3.6). Pages: only one
  principal's pages on each result (no shared-result pages of two principals, no
  OwnershipError paths), no resume after a restart, and the records' durable
  contents are not compared (only the book and each open's outcome).
- The window between a start's last stage and its settlement: the machine
  drains every mailbox after each step, so a stop landing exactly there (the
  target-only judgement of the claim) is not reached.

Start cascade (reference §1.2; API: "rt.start syncs every document it visits")
- root sync -> each link hop -> target found (registered: done) -> pattern load
  -> dependency pre-sync (`World.presync`) -> registered? done : install. After
  each sync the whole attempt must be current (`_current`); a failed load
  fails the attempt (it claims nothing and its future raises).
- Loads: one load per (replica, document) at a time; a second sync of a
  document already loading waits on the same load (`_loading`, `_waiters`).
  A held document's load waits in its `MGate` until `release` or `fail`.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

KNOWN_BUG_ADOPTION_ZOMBIE = False
"""Found by the nightly run: a top-level run that adopts a running result drops the
release an earlier launch deferred behind a start in flight (036be3b), and is not undone
when its own transaction fails; if the start then claims nothing, the result runs with
no owner. Fixed; pinned by the regression test tests/runner/test_found_by_model.py::
test_an_adopting_run_that_fails_restores_the_deferred_release. While True, `unjustified`
tallies such registrations in `known_bug_zombies` instead of failing; set it to False
with the fix."""

KNOWN_BUG_ROLLBACK_AFTER_ADOPTION = False
"""Found by the nightly run: a release an older launch makes *after* a later launch
adopted the running child (the older setup's rollback) is deferred behind a start in
flight and applied when that start claims nothing, ending a child a running parent
holds. Fixed; pinned by the regression test tests/runner/test_found_by_model.py::
test_a_rollback_deferred_after_an_adoption_spares_the_adopted_child. While True,
`_settle` tallies it in `known_bug_late_rollbacks` instead of reporting a violation.
Fixed: a parent's nested launch that adopts a running child marks it `adopted`, and the
installing launch's rollback then leaves it to that parent (`_rollback`)."""

# --------------------------------------------------------------------------- static world


@dataclass(frozen=True)
class World:
    """The documents: results (with their nested children) and link documents."""

    patterns: dict[str, str]
    """result name -> pattern name"""
    children: dict[str, tuple[str, ...]]
    """result name -> its nested children's result names (in node order)"""
    links: dict[str, str]
    """link document -> the document it points at (a result or another link)"""

    def arg(self, doc: str) -> str:
        return f"arg:{doc}"

    def pattern_doc(self, doc: str) -> str:
        return f"pat:{self.patterns[doc]}"

    lists: dict[str, tuple[str, str]] = field(default_factory=dict)
    """result name -> (its map container, the list document it maps)"""
    elements: dict[str, str] = field(default_factory=dict)
    """element child name -> the result whose coordinator launches it"""

    presync_child_arguments: bool = False
    """Whether the dependency pre-sync also syncs each descendant's argument document
    (the spec leaves it open; the machine's world states which, and the machine's load
    holds check that the runtime agrees)."""

    def presync(self, doc: str) -> list[str]:
        """The run's own documents: its argument, then every descendant's result doc
        (and its argument doc, if `presync_child_arguments`), depth first."""
        out = [self.arg(doc)]
        if doc in self.lists:
            out.append(self.lists[doc][0])
        stack = list(reversed(self.children[doc]))
        while stack:
            child = stack.pop()
            out.append(child)
            if self.presync_child_arguments:
                out.append(self.arg(child))
            stack.extend(reversed(self.children[child]))
        return out


class LoadFailed(Exception):
    """A held load that `MGate.fail` failed (the runtime raises a LIVENESS error)."""


# --------------------------------------------------------------------------- store side


@dataclass(eq=False)
class MGate:
    id: int
    doc: str
    active: bool = True
    waiting: list[tuple[RunnerModel, str]] = field(default_factory=list)


class StoreModel:
    """What the runners share: load gates (a held document holds every replica's load)."""

    def __init__(self) -> None:
        self.gates: dict[int, MGate] = {}
        self._ids = itertools.count(1)
        self.tokens = itertools.count(1)
        self.clock = itertools.count(1)
        """Logical time: when causes happened (for 'no stopped result running')."""

    def held_by(self, doc: str) -> MGate | None:
        for gate in self.gates.values():
            if gate.active and gate.doc == doc:
                return gate
        return None

    def hold(self, doc: str) -> MGate:
        assert self.held_by(doc) is None, doc
        gate = MGate(next(self._ids), doc)
        self.gates[gate.id] = gate
        return gate

    def release(self, gate: MGate, *, fail: bool = False) -> None:
        gate.active = False
        waiting, gate.waiting = gate.waiting, []
        for runner, doc in waiting:
            err = LoadFailed(doc) if fail else None
            runner.post(lambda r=runner, d=doc, e=err: r._on_loaded(d, e))  # type: ignore[misc]


# --------------------------------------------------------------------------- runner side


@dataclass(eq=False)
class MReg:
    doc: str
    token: int
    launch: str
    """'run', 'gated', 'start' or 'nested'"""
    cause: int
    """logical time of the action that led to this install"""
    tx: MTx | None = None
    """the setup transaction of a 'run' launch"""
    parent: str | None = None
    cleanups: list[tuple[str, int | None]] = field(default_factory=list)
    """(child, token or None): the releases this run's teardown performs"""
    adopted: bool = False
    """A later parent's nested launch found it running and holds it now (its teardown
    releases it): the installing launch's rollback no longer ends it."""
    owed: bool = False
    """Its setup writes did not land (a stale basis kept it): the next launch that finds
    it running re-issues them (DESIGN §4.3 item 2)."""


@dataclass(eq=False)
class MPending:
    id: int
    doc: str
    cause: int
    cancelled: bool = False
    settled: bool = False


@dataclass(eq=False)
class MTx:
    id: int
    callbacks: list[Callable[[str], None]] = field(default_factory=list)
    outcome: str | None = None
    """None while open or held; then 'OK', 'STALE_BASIS', 'PERMANENT', 'ABORTED', ..."""

    def settle(self, outcome: str) -> None:
        assert self.outcome is None, self
        self.outcome = outcome
        callbacks, self.callbacks = self.callbacks, []
        for cb in callbacks:
            cb(outcome)


@dataclass(eq=False)
class MAttempt:
    id: int
    start_doc: str
    epoch: int
    cause: int
    discovered: dict[str, bool] = field(default_factory=dict)
    """doc -> has it been bumped (stopped, released, replaced) since discovery?"""
    tombstones: set[str] = field(default_factory=set)
    target: str | None = None
    gen: Generator[list[str], BaseException | None, bool] | None = None
    result: bool | str | None = None
    """None while in flight; then True / False, or 'error' (a failed load)"""
    on_claim: Callable[[str], None] | None = None
    on_done: Callable[[MAttempt], None] | None = None


@dataclass(eq=False)
class MPage:
    """A page record: `name` opened by `principal` (recorded before it starts)."""

    principal: str
    name: str
    key: str | None = None
    """the result its start claimed"""
    stopped: bool = False
    opening: int = 0
    """opens of this record in flight"""
    opened: bool = False
    """an open of it succeeded"""
    result: bool | str | None = None
    """the open's outcome: None while opening, then True / False / 'error'"""


RETRYABLE_OUTCOMES = ("STALE_BASIS", "LIVENESS")
MAX_RECORD_RETRIES = 10


class RunnerModel:
    """One runtime's ownership state (its registrations, attempts, pending starts)."""

    def __init__(self, world: World, store: StoreModel) -> None:
        self.world = world
        self.store = store
        self.regs: dict[str, MReg] = {}
        self.lifetimes: set[str] = set()
        self.pending: dict[str, list[MPending]] = {}
        self.attempts: list[MAttempt] = []
        self.declined: dict[str, tuple[int, str]] = {}
        """doc -> (token, origin): a release that declined behind a start in flight;
        origin is "launch" (teardown, rollback) or "user" (`rt.release`)."""
        self.epoch = 0
        self.fifo: deque[Callable[[], None]] = deque()
        self._loading: set[str] = set()
        self._waiters: dict[str, list[Callable[[BaseException | None], None]]] = {}
        self._ids = itertools.count(1)
        self.last_stop: dict[str, int] = {}
        """doc -> logical time of the last stop that reached it (stop or stop_all)"""
        self.stop_all_time = 0
        self.violations: list[str] = []
        self.adoptions: dict[str, tuple[int, MTx]] = {}
        """doc -> (token, the run's tx) for a top-level run that dropped a deferral"""
        self.known_bug_zombies: list[str] = []
        """Registrations only `KNOWN_BUG_ADOPTION_ZOMBIE` leaves behind (tallied)."""
        self.adopted_tokens: set[int] = set()
        """Registrations a later launch found running and adopted."""
        self.known_bug_late_rollbacks: list[str] = []
        """Violations only `KNOWN_BUG_ROLLBACK_AFTER_ADOPTION` causes (tallied)."""
        self.pages: dict[tuple[str, str], MPage] = {}
        """(principal, opened name) -> page record (`Pages.by_pid`)"""
        self.pages_by_key: dict[str, dict[str, MPage]] = {}
        """claimed result -> principal -> page record (`Pages.by_key`)"""
        self.on_page_record: Callable[[MTx], None] = lambda mtx: mtx.settle("OK")
        """Called with each page-open record write: the driver gives it its verdict."""
        self.list_elements: Callable[[str], list[str]] = lambda _doc: []
        """The element children the list of a list result holds now, as this runner's
        replica reads it (the list and element pre-sync stages visit their documents)."""
        self.on_runner_tx: Callable[[MTx, str], None] | None = None
        """Called with the runner's own transaction (a start's, a gated install's) right
        after the install it stages: the driver decides (or reads) its verdict."""

    # ------------------------------------------------------------ mailbox
    def post(self, fn: Callable[[], None]) -> None:
        self.fifo.append(fn)

    def drain(self) -> None:
        while self.fifo:
            self.fifo.popleft()()

    # ------------------------------------------------------------ registrations
    def _install(self, doc: str, launch: str, cause: int, tx: MTx | None = None) -> MReg:
        """Install `doc`, then launch its nested children (rollback on `tx` if given)."""
        assert doc not in self.regs, doc
        reg = MReg(doc, next(self.store.tokens), launch, cause, tx=tx if launch == "run" else None)
        self.regs[doc] = reg
        here = next(self.store.clock)
        for child in self.world.children[doc]:
            token = self._launch_child(child, here, tx)
            reg.cleanups.append((child, token))
        return reg

    def _adopt(self, doc: str, tx: MTx | None = None) -> None:
        """A launch found `doc` running: it holds it now (tokenless), so a release an
        earlier launch deferred behind a start in flight no longer applies to it."""
        self.adopted_tokens.add(self.regs[doc].token)
        if doc in self.declined and self.declined[doc][0] == self.regs[doc].token:
            del self.declined[doc]
            if tx is not None:
                token = self.regs[doc].token
                self.adoptions[doc] = (token, tx)
                if not KNOWN_BUG_ADOPTION_ZOMBIE:
                    # ... unless the adopting launch's setup does not land either: then
                    # the dropped release applies (deferred again while a start is in
                    # flight), to that registration only: nothing else is released.
                    tx.callbacks.append(self._adopted_rollback(doc, token))

    def _adopted_rollback(self, doc: str, token: int) -> Callable[[str], None]:
        def settled(outcome: str) -> None:
            if outcome in ("OK", "STALE_BASIS"):
                return
            reg = self.regs.get(doc)
            if reg is not None and reg.token == token:
                self.release(doc, token)

        return settled

    def _runner_tx(self, doc: str, launch: str, cause: int) -> None:
        """Install `doc` with the runner's own transaction staging its nested children's
        setups (a start's, a gated install's): the children roll back with it."""
        stx = self.new_tx()
        self._install(doc, launch, cause, stx)
        if launch == "start":
            stx.callbacks.append(self._start_settled(doc))
        if self.on_runner_tx is not None:
            self.on_runner_tx(stx, doc)
        else:
            stx.settle("OK")

    def _launch_child(self, child: str, cause: int, tx: MTx | None) -> int | None:
        if child in self.regs:
            if self.regs[child].owed and tx is not None:
                self._repay(child, tx)
            if tx is not None:
                self.regs[child].adopted = True
            self._adopt(child, tx)
            return None  # already running: this launch holds no token (releases tokenless)
        reg = self._install(child, "nested", cause, tx)
        reg.parent = None  # set by the caller's cleanups; kept for diagnostics
        if tx is not None:
            tx.callbacks.append(self._rollback(child, reg.token))
        return reg.token

    def _rollback(self, doc: str, token: int) -> Callable[[str], None]:
        def settled(outcome: str) -> None:
            if outcome == "OK":
                return
            reg = self.regs.get(doc)
            current = reg is not None and reg.token == token
            if outcome == "STALE_BASIS":
                if reg is not None and current:
                    reg.owed = True  # kept: the writes are owed (debt)
                return
            if reg is not None and current and reg.adopted:
                return  # a later parent holds it now; its teardown releases it
            self.release(doc, token)

        return settled

    def _descendants(self, doc: str) -> list[str]:
        out: list[str] = []
        for child in self.world.children[doc]:
            out.append(child)
            out.extend(self._descendants(child))
        return out

    def _repay(self, doc: str, tx: MTx) -> None:
        """A launch found `doc` running with owed setup writes: it re-issues them in its
        own transaction, its descendants' too. Paid only if that transaction lands: on
        any other outcome whatever was owed (and still the same registration) is owed
        again."""
        was_owed: list[tuple[str, int]] = []
        for d in (doc, *self._descendants(doc)):
            reg = self.regs.get(d)
            if reg is not None and (d == doc or reg.owed):
                was_owed.append((d, reg.token))
            if reg is not None:
                reg.owed = False

        def settled(outcome: str) -> None:
            if outcome == "OK":
                return
            for d, token in was_owed:
                reg = self.regs.get(d)
                if reg is not None and reg.token == token:
                    reg.owed = True

        tx.callbacks.append(settled)

    def _start_settled(self, doc: str) -> Callable[[str], None]:
        """A start's own transaction (its nested children's setups) did not land on a
        stale basis: it issues those writes again at once (while `doc` is registered)."""

        def settled(outcome: str) -> None:
            if outcome != "STALE_BASIS" or doc not in self.regs:
                return
            for d in self._descendants(doc):
                reg = self.regs.get(d)
                if reg is not None:
                    reg.owed = False

        return settled

    def _end(self, doc: str) -> MReg | None:
        reg = self.regs.pop(doc, None)
        if reg is None:
            return None
        self.lifetimes.discard(doc)  # no orphaned lifetime (§4.3.3)
        if doc in self.declined and self.declined[doc][0] == reg.token:
            del self.declined[doc]
        for child, token in reversed(reg.cleanups):
            self.release(child, token)
        return reg

    def _bump(self, doc: str) -> None:
        for att in self.attempts:
            if doc in att.discovered:
                att.discovered[doc] = True

    def _cancel_pending(self, doc: str) -> None:
        for p in self.pending.pop(doc, []):
            p.cancelled = True
            p.settled = True

    def _in_flight(self, doc: str) -> bool:
        return any(doc in att.discovered for att in self.attempts)

    # ------------------------------------------------------------ pages
    def open_page(self, principal: str, name: str) -> MPage:
        """`open_page`: record the page (a write that must land), then start it; True once
        it runs with a lifetime. A start that fails or claims nothing withdraws it."""
        rec = self.pages.get((principal, name))
        if rec is None or rec.stopped:
            rec = MPage(principal, name)
            self.pages[(principal, name)] = rec  # known now: a stop before it lands reaches it
        page = rec
        page.opening += 1
        out = MPage(principal, name)  # carries this open's result

        def last() -> bool:
            # This open decides the record's fate only if no other open of it is in
            # flight and none succeeded (found by this machine; see test_found_by_model).
            page.opening -= 1
            return page.opening == 0 and not page.opened

        def recorded(outcome: str) -> None:
            if page.stopped:
                page.opening -= 1
                out.result = False  # stopped while opening: the stop wins
                return
            if outcome != "OK":
                if last():
                    self._forget_page(page)
                out.result = "error"
                return
            att = self.start(name, on_claim=lambda key: self._claim_page(page, key))
            att.on_done = after_start

        def after_start(att: MAttempt) -> None:
            if att.result == "error":
                if last():
                    self._forget_page(page)
                out.result = "error"
            elif not att.result or page.stopped:
                if last() and not page.stopped:
                    self._forget_page(page)  # withdrawn: a restart never resumes it
                out.result = False
            else:
                page.opening -= 1
                page.opened = True
                out.result = True

        self._write_record(recorded, 0, page)
        return out

    def _write_record(self, done: Callable[[str], None], attempt: int, page: MPage) -> None:
        mtx = self.new_tx()

        def settled(outcome: str) -> None:
            # Re-issued only while the page is not stopped: a retry landing after the
            # stop's record would bring back a page whose stop was acknowledged.
            if outcome in RETRYABLE_OUTCOMES and attempt < MAX_RECORD_RETRIES and not page.stopped:
                self._write_record(done, attempt + 1, page)
            else:
                done(outcome)

        mtx.callbacks.append(settled)
        self.on_page_record(mtx)

    def _claim_page(self, page: MPage, key: str) -> None:
        page.key = key
        self.pages_by_key.setdefault(key, {})[page.principal] = page

    def _forget_page(self, page: MPage) -> None:
        if self.pages.get((page.principal, page.name)) is page:
            del self.pages[(page.principal, page.name)]
        if page.key is not None:
            holders = self.pages_by_key.get(page.key)
            if holders is not None and holders.get(page.principal) is page:
                del holders[page.principal]
                if not holders:
                    del self.pages_by_key[page.key]

    def stop_as(self, principal: str, doc: str, generation: int | None = None) -> None:
        """A principal's `stop`: a page of theirs on `doc` (opened as `doc`, or claimed
        `doc`) is closed first, with every other page of theirs on the same result; the
        result then stops unless another principal's page holds it."""
        own = self.pages.get((principal, doc))
        if own is None:
            own = self.pages_by_key.get(doc, {}).get(principal)
        if own is not None:
            key = own.key
            if generation is not None:
                reg = self.regs.get(key or doc)
                if reg is None or reg.token != generation:
                    return  # a stale generation does nothing, to the page either (§4.3.7)
            same = [
                r
                for (p, _name), r in self.pages.items()
                if p == principal and r is not own and key is not None and r.key == key
            ]
            for page in (own, *same):
                page.stopped = True
                self._forget_page(page)
            if key is not None and self.pages_by_key.get(key):
                return  # another principal's page still holds it
            doc = key or doc
        self.stop(doc, generation)

    # ------------------------------------------------------------ list coordinators
    def coordinator_installed(self, doc: str) -> MReg:
        """The list result's coordinator launched element child `doc` (observed: the
        model does not re-derive when a reconcile runs; see the module docstring)."""
        assert doc in self.world.elements and doc not in self.regs, doc
        reg = MReg(doc, next(self.store.tokens), "element", next(self.store.clock))
        self.regs[doc] = reg
        return reg

    def coordinator_released(self, doc: str) -> None:
        """A coordinator's tokenless release ended element child `doc` (observed). A
        release never ends a result with a lifetime of its own."""
        reg = self.regs[doc]
        assert reg.launch == "element", reg
        if doc in self.lifetimes:
            self.violations.append(f"a coordinator's release ended {doc}, which held a lifetime")
        self._end(doc)

    # ------------------------------------------------------------ the two authorities
    def stop(self, doc: str, generation: int | None = None) -> None:
        if generation is not None:
            reg = self.regs.get(doc)
            if reg is None or reg.token != generation:
                return  # a stale generation does nothing (§4.3.7)
        for att in self.attempts:
            if doc not in att.discovered:
                att.tombstones.add(doc)
        self.last_stop[doc] = next(self.store.clock)
        self._stop_result(doc)

    def _stop_result(self, doc: str) -> None:
        self.lifetimes.discard(doc)
        self._cancel_pending(doc)
        self._bump(doc)
        self._end(doc)

    def release(self, doc: str, token: int | None = None, origin: str = "launch") -> bool:
        """Returns True if it ended a registration."""
        reg = self.regs.get(doc)
        if token is not None and reg is not None and reg.token != token:
            return False  # a replacement owns itself
        if doc in self.lifetimes:
            return False
        if self._in_flight(doc):
            if reg is not None:
                self.declined[doc] = (reg.token, origin)  # applied if the start claims nothing
            return False
        if reg is None:
            self._cancel_pending(doc)
            return False
        if token is not None and reg.token != token:  # pragma: no cover - checked above
            self.violations.append(f"release of {doc} with {token} ended {reg.token}")
        self.lifetimes.discard(doc)
        self._cancel_pending(doc)
        self._bump(doc)
        self._end(doc)
        return True

    def stop_all(self) -> None:
        self.epoch += 1
        now = next(self.store.clock)
        self.stop_all_time = now
        for doc in list(self.pending):
            self._cancel_pending(doc)
        self.lifetimes.clear()
        self.declined.clear()
        for doc in list(self.regs):
            self._end(doc)

    # ------------------------------------------------------------ launches
    def new_tx(self) -> MTx:
        return MTx(next(self._ids))

    def run(self, tx: MTx, doc: str, *, gated: bool) -> None:
        """`rt.run(tx, pattern, ..., doc)` (setup staged in `tx`, then launch)."""
        cause = next(self.store.clock)
        if doc in self.regs:
            if self.regs[doc].owed:
                self._repay(doc, tx)
            self._adopt(doc, tx)
            return  # same pattern already running: only its argument is updated
        if gated:
            pending = MPending(next(self._ids), doc, cause)
            self.pending.setdefault(doc, []).append(pending)

            def settled(outcome: str) -> None:
                if pending.cancelled:
                    return  # stopped or released before the commit: install nothing
                pending.settled = True
                starts = self.pending.get(doc, [])
                if pending in starts:
                    starts.remove(pending)
                    if not starts:
                        del self.pending[doc]
                if outcome != "OK" or doc in self.regs:
                    return
                self._runner_tx(doc, "gated", pending.cause)

            tx.callbacks.append(settled)
            return
        reg = self._install(doc, "run", cause, tx)
        tx.callbacks.append(self._rollback(doc, reg.token))

    # ------------------------------------------------------------ start attempts
    def start(self, doc: str, on_claim: Callable[[str], None] | None = None) -> MAttempt:
        att = MAttempt(next(self._ids), doc, self.epoch, next(self.store.clock))
        att.on_claim = on_claim
        self.attempts.append(att)
        self._track(att, doc)
        att.gen = self._cascade(att)
        self._step(att, None)
        return att

    def _track(self, att: MAttempt, doc: str) -> None:
        att.discovered.setdefault(doc, False)

    def _current(self, att: MAttempt) -> bool:
        if att.epoch != self.epoch or att not in self.attempts:
            return False
        return not any(bumped or doc in att.tombstones for doc, bumped in att.discovered.items())

    def _current_for(self, att: MAttempt, doc: str) -> bool:
        return (
            att.epoch == self.epoch
            and doc in att.discovered
            and doc not in att.tombstones
            and not att.discovered[doc]
        )

    def _cascade(self, att: MAttempt) -> Generator[list[str], BaseException | None, bool]:
        doc = att.start_doc
        while True:
            self._track(att, doc)
            yield [doc]
            if not self._current(att):
                return False
            if doc in self.world.patterns:
                break
            doc = self.world.links[doc]
        att.target = doc
        if doc in self.regs:
            return True
        yield [self.world.pattern_doc(doc)]
        if not self._current(att):
            return False
        yield self.world.presync(doc)
        if not self._current(att):
            return False
        if doc in self.world.lists:
            yield [self.world.lists[doc][1]]
            if not self._current(att):
                return False
            yield [d for el in self.list_elements(doc) for d in (el, *self.world.presync(el))]
            if not self._current(att):
                return False
        if doc in self.regs:
            return True
        self._runner_tx(doc, "start", att.cause)
        return True

    def _step(self, att: MAttempt, error: BaseException | None) -> None:
        gen = att.gen
        assert gen is not None
        try:
            keys = gen.send(None) if error is None else gen.throw(error)
        except StopIteration as stop:
            running = bool(stop.value)
            self.post(lambda: self._settle(att, running, None))
            return
        except LoadFailed as exc:
            failure = exc
            self.post(lambda: self._settle(att, False, failure))
            return
        self._sync(keys, lambda err: self._step(att, err))

    def _sync(self, keys: list[str], done: Callable[[BaseException | None], None]) -> None:
        keys = list(dict.fromkeys(keys))
        if not keys:
            self.post(lambda: done(None))
            return
        remaining = [len(keys)]
        finished = [False]

        def one_done(error: BaseException | None) -> None:
            if finished[0]:
                return
            if error is not None:
                finished[0] = True
                done(error)
                return
            remaining[0] -= 1
            if remaining[0] == 0:
                finished[0] = True
                done(None)

        for key in keys:
            self._waiters.setdefault(key, []).append(one_done)
            if key not in self._loading:
                self._loading.add(key)
                gate = self.store.held_by(key)
                if gate is not None:
                    gate.waiting.append((self, key))
                else:
                    self.post(lambda k=key: self._on_loaded(k, None))  # type: ignore[misc]

    def _on_loaded(self, doc: str, error: BaseException | None) -> None:
        self._loading.discard(doc)
        for fn in self._waiters.pop(doc, []):
            fn(error)

    def _settle(self, att: MAttempt, running: bool, error: BaseException | None) -> None:
        target = att.target
        claimed = (
            error is None
            and running
            and target is not None
            and self._current_for(att, target)
            and target in self.regs
        )
        if claimed:
            assert target is not None
            self.lifetimes.add(target)
            if att.on_claim is not None:
                att.on_claim(target)
        keys = list(att.discovered)
        self.attempts.remove(att)
        for key in keys:
            entry = self.declined.get(key)
            if entry is not None and not self._in_flight(key):
                token, origin = entry
                del self.declined[key]
                holders = [p.doc for p in self.regs.values() if (key, None) in p.cleanups]
                if self.release(key, token) and holders and origin == "launch":
                    # A launch's deferred release must not end a child that a running
                    # parent launched since (adoption drops the deferral, see `_adopt`).
                    if KNOWN_BUG_ROLLBACK_AFTER_ADOPTION and token in self.adopted_tokens:
                        # ... deferred after that adoption (an older setup's rollback)
                        self.known_bug_late_rollbacks.append(f"{key} (token {token})")
                        continue
                    self.violations.append(
                        f"a deferred release ended {key} (token {token}), which the running"
                        f" {', '.join(holders)} launched and still holds"
                    )
        att.result = "error" if error is not None else claimed
        if att.on_done is not None:
            att.on_done(att)

    # ------------------------------------------------------------ properties
    def unjustified(self) -> list[str]:
        """Registrations no owner justifies: not a lifetime, not a live launch."""
        bad = []
        for doc, reg in self.regs.items():
            if doc in self.lifetimes:
                continue
            if reg.launch == "gated":
                continue  # the caller's run, durable: ended only by its caller's stop
            if reg.launch == "element" and self.world.elements[doc] in self.regs:
                continue  # its list result's coordinator holds it (checked exactly at the end)
            if reg.launch == "run":
                assert reg.tx is not None
                if reg.tx.outcome in (None, "OK", "STALE_BASIS"):
                    continue
            if any(
                (doc, tok) in p.cleanups for p in self.regs.values() for tok in (reg.token, None)
            ):
                continue  # a running parent will release it
            adopted = self.adoptions.get(doc)
            if (
                adopted is not None
                and adopted[0] == reg.token
                and adopted[1].outcome in (None, "OK", "STALE_BASIS")
            ):
                continue  # a later run adopted it and that run's setup landed: it owns it
            if (
                KNOWN_BUG_ADOPTION_ZOMBIE
                and adopted is not None
                and adopted[0] == reg.token
                and adopted[1].outcome not in (None, "OK", "STALE_BASIS")
            ):
                self.known_bug_zombies.append(f"{doc} ({reg.launch}, token {reg.token})")
                continue
            bad.append(f"{doc} ({reg.launch}, token {reg.token})")
        return bad

    def stopped_but_running(self) -> list[str]:
        """Registrations whose launch began before the last stop that reached their key."""
        return [
            f"{doc} (cause {reg.cause}, stopped at {self.last_stop.get(doc)})"
            for doc, reg in self.regs.items()
            if reg.cause < max(self.last_stop.get(doc, 0), self.stop_all_time)
        ]

    def leaks(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.attempts:
            out["attempts"] = [a.id for a in self.attempts]
        if self.pending:
            out["pending"] = sorted(self.pending)
        if self.declined:
            out["declined"] = dict(self.declined)
        if not self.lifetimes <= set(self.regs):
            out["lifetimes"] = sorted(self.lifetimes - set(self.regs))
        if self.fifo or self._loading or self._waiters:
            out["loads"] = sorted(self._loading)
        return out
