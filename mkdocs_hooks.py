"""mkdocs hooks for the documentation site (mkdocs.yml `hooks:`).

The pages link to the example programs as files of the repository
(`../examples/demo.py` from docs/tutorial.md), which is right on a code host
but outside the site. In the site, such a link goes to that program's section
of the Examples page (docs/examples.md, which includes each file), so a
reader of either finds the code and the site's link check stays strict: a
program without a section there is a missing anchor, which fails the build.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

_EXAMPLE_LINK = re.compile(r"\]\(((?:\.\./)+)examples/(\w+)\.py\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    src = page.file.src_uri  # e.g. "howto/lists.md"
    depth = src.count("/")
    examples_page = posixpath.relpath("examples.md", posixpath.dirname(src) or ".")

    def rewrite(m: re.Match[str]) -> str:
        ups, name = m.group(1), m.group(2)
        if ups.count("../") != depth + 1:  # not the repository's examples/ directory
            return m.group(0)
        return f"]({examples_page}#{name.replace('_', '-')})"

    return _EXAMPLE_LINK.sub(rewrite, markdown)
