"""`python -m cellweave` is the `cellweave` command."""

from __future__ import annotations

from ._cli import main

raise SystemExit(main())
