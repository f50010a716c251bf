"""The README's opening sample runs as written and prints what its comments say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_sample_prints_what_its_comments_say(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S)
    assert code is not None, "README.md has no python block"
    sample = code.group(1)
    expected = re.findall(r"print\(.*\)  # (.*)$", sample, re.M)
    assert expected, "the sample's print() calls say what they print in a comment"
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", sample],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert "" == out.stderr
    assert expected == out.stdout.splitlines()
