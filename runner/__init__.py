"""runner: patterns, the Runtime, and who may end each child run.

What it is (so far): the pattern builder — `@pattern`, `lift`, `handler`,
`navigate_to` — which traces pattern functions into serializable graphs with
stable identities (`load_pattern`); and the `Runtime` facade (transactions,
reactive cells, sessions, settle/idle). Coming next: setup and start, nested
children, registrations, stop and release, lifetimes, pages, list coordinators
and cold resume (see DESIGN.md §4).
What it is not: scheduling (see `scheduler`) or storage (see `cells`).
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
from ._runtime import Runtime as Runtime
from ._runtime import Session as Session
from .errors import OwnershipError as OwnershipError
from .errors import PageError as PageError
from .errors import PatternCycleError as PatternCycleError
from .errors import PatternError as PatternError
from .errors import PatternLoadError as PatternLoadError
from .errors import ResumeError as ResumeError

__all__ = [
    "Binding",
    "Handler",
    "Lift",
    "Navigate",
    "NodeSpec",
    "OwnershipError",
    "PageError",
    "Pattern",
    "PatternCycleError",
    "PatternError",
    "PatternGraph",
    "PatternInstance",
    "PatternLoadError",
    "Ref",
    "ResumeError",
    "Runtime",
    "Session",
    "handler",
    "lift",
    "load_pattern",
    "navigate_to",
    "pattern",
]
