"""Runnable example programs that the docs quote (run one with `python -m examples.NAME`)."""
