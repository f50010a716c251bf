"""runner: patterns, the Runtime, and who may end each child run.

What it is: the pattern builder (`@pattern`, `lift`, `handler`, `navigate_to`,
`state` for a cell the run owns, `when` / `unless` for conditional values and
children, and the list builtins `.map`, `.filter`, `.flat_map` on a `Ref`),
which traces pattern functions into serializable graphs with stable identities
(`load_pattern`); typed parameters, results and handler events (annotations
checked with msgspec, defaults filled, `Pattern.schema()` as JSON Schema); and
the `Runtime` facade, with `Session` views acting for other (principal,
session) identities. A runtime sets up, runs, starts, stops
and releases pattern runs (nested children, computed children, what handlers
launch, one child per list element, its result narrowed to the scope of the
element or of what controls the list's cardinality), keeps one registration per running
result, and applies the ownership rules: `stop` is authoritative over a
result, `release` only over the registration its own launch installed; a
result started in its own right holds an independent lifetime; a commit-gated
start is owned before it installs; a setup whose transaction fails is rolled
back (released), and one that fails on a stale basis is kept and owes its
writes. Pages are durable intent: `open_page` (or a navigation) records the
page for its principal before starting it, `stop` records the stop first, and
`resume()` starts the pages recorded open after a restart; an open page is
demand (kept computed while open), and one opened through a list slot is
pinned to the element the slot holds. A send brings what resolves its stream
up to date first (starting a set-up result, computing the path to a list
element's handler). Handlers run as the identity that sent the event.
`inspect()` and the lifecycle trace show what runs and why. `serve_pages()`
runs the open pages of every principal under claims in the store (a
`PageServer`: leases, heartbeats, fenced takeovers), so several processes
share them, one owner per page.

The principal boundary: a `Session` is what a service hands to code acting
for one user. Its transactions touch only what its identity resolves to (the
check is `cells`'); its `stop` and `release` end only what its principal
launched or opened (`OwnershipError` otherwise, whatever generation is
named); every call checks its arguments (`ArgumentError`). Page records and
event receipts are internal documents only the runtime's `Authority` reaches.

What it is not: scheduling (see `scheduler`) or storage (see `cells`); a
sandbox for code that holds the `Runtime` itself; several processes sharing
the work of one store (no page leases yet).
"""

from ._builder import Binding as Binding
from ._builder import Handler as Handler
from ._builder import Lift as Lift
from ._builder import Navigate as Navigate
from ._builder import NodeSpec as NodeSpec
from ._builder import Pattern as Pattern
from ._builder import PatternGraph as PatternGraph
from ._builder import PatternInstance as PatternInstance
from ._builder import Ref as Ref
from ._builder import handler as handler
from ._builder import lift as lift
from ._builder import load_pattern as load_pattern
from ._builder import navigate_to as navigate_to
from ._builder import pattern as pattern
from ._claims import PageServer as PageServer
from ._remote_events import RemoteHandlingError as RemoteHandlingError
from ._runtime import Runtime as Runtime
from ._sent import Sent as Sent
from ._session import Session as Session
from ._state import state as state
from ._when import unless as unless
from ._when import when as when
from .errors import ArgumentError as ArgumentError
from .errors import OwnershipError as OwnershipError
from .errors import PageError as PageError
from .errors import PatternCycleError as PatternCycleError
from .errors import PatternError as PatternError
from .errors import PatternLoadError as PatternLoadError
from .errors import ResumeError as ResumeError

__all__ = [
    "ArgumentError",
    "Binding",
    "Handler",
    "Lift",
    "Navigate",
    "NodeSpec",
    "OwnershipError",
    "PageError",
    "PageServer",
    "Pattern",
    "PatternCycleError",
    "PatternError",
    "PatternGraph",
    "PatternInstance",
    "PatternLoadError",
    "Ref",
    "RemoteHandlingError",
    "ResumeError",
    "Runtime",
    "Sent",
    "Session",
    "handler",
    "lift",
    "load_pattern",
    "navigate_to",
    "pattern",
    "state",
    "unless",
    "when",
]
