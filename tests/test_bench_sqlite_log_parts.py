"""`python -m bench.sqlite_log_parts`: decoded entries are counted and reported."""

from __future__ import annotations

import re
from pathlib import Path

from bench import sqlite_log_parts


def test_walks_and_pruning_are_counted(tmp_path: Path) -> None:
    out = sqlite_log_parts.measure(str(tmp_path), 300, [20, 40])
    # A 300-document commit: a walk decodes its row's 128, plus one part (128, or 44).
    walked = [int(n) for n in re.findall(r"(\d+) entries decoded, ", out)]
    assert [128, 256, 172] == walked, out
    per_doc = re.findall(r"N= +(\d+): +(\d+) entries decoded", out)
    assert ["20", "40"] == [n for n, _ in per_doc], out
    assert all(int(total) > 0 for _, total in per_doc), out
    assert [] == list(tmp_path.iterdir())  # files removed
