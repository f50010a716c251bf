"""runner: patterns, the Runtime facade, and who may end each child run.

It holds patterns and the builder that traces them, the Runtime, registrations
and start/stop/release, independent lifetimes, pending starts, rollback with the
setup transaction, list coordinators (map, filter, flat_map), pages, cold
resume and inspection.

Not here: how nodes are scheduled (scheduler), or how values are stored and
committed (cells). Imports point down only: runner uses scheduler and cells.
"""

from __future__ import annotations

__all__: list[str] = []
