"""scheduler: runs exactly the work someone observes, inside transactions.

It holds nodes (computations, effects, event handlers), their read sets and the
reader index, demand, value-accurate invalidation, bounded passes, time gates
(debounce, throttle, backoff), events and their lineage.

Not here: patterns or pieces (runner), values, documents and stores (cells).
Imports point down only: scheduler uses cells and never runner.
"""

from __future__ import annotations

__all__: list[str] = []
