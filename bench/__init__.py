"""Benchmarks: ``python -m bench [GROUP ...]`` runs them and prints one table.

Each ``bench_*.py`` module here registers benchmarks with ``@bench(...)``;
``harness.py`` says how to add one and how they are measured.
"""

from __future__ import annotations

from bench.harness import Benchmark as Benchmark
from bench.harness import bench as bench

__all__ = ["Benchmark", "bench"]
