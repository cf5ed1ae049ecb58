"""Generated blocks in a markdown page: ``<!-- table:NAME -->`` ... ``<!-- /table:NAME -->``, each marker
on a line of its own (a marker quoted inside a line of text is text).

Everything between the two markers belongs to the generator; the text around them is the page's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable

BLOCK = re.compile(r"^(<!-- table:(?P<name>[\w-]+) -->\n)(?P<body>.*?)^(<!-- /table:(?P=name) -->)$",
                   re.DOTALL | re.MULTILINE)
OPENING, CLOSING = re.compile(r"^<!-- table:", re.MULTILINE), re.compile(r"^<!-- /table:", re.MULTILINE)


class BlockError(ValueError):
    """A page whose markers do not match the generators."""


def names(page: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(page)]


def render(page: str, build: Callable[[str], str], known: set[str]) -> str:
    """PAGE with every block's body replaced by BUILD(name); an unknown or repeated name, a marker
    without its partner, or a known table with no block is refused."""
    found = names(page)
    unknown = [n for n in found if n not in known]
    if unknown:
        raise BlockError(f"no generator for table {unknown[0]!r} (generators: {', '.join(sorted(known))})")
    repeated = {n for n in found if found.count(n) > 1}
    if repeated:
        raise BlockError(f"table {sorted(repeated)[0]!r} appears more than once")
    if len(OPENING.findall(page)) != len(found) or len(CLOSING.findall(page)) != len(found):
        raise BlockError("a table marker without its closing partner")
    absent = sorted(known - set(found))
    if absent:
        raise BlockError(f"tables without a block in the page: {', '.join(absent)}")
    return BLOCK.sub(lambda m: m.group(1) + build(m.group("name")) + m.group(4), page)


def differing(page: str, rendered: str) -> list[str]:
    """Names of the blocks whose bodies differ between two versions of a page."""
    before = {m.group("name"): m.group("body") for m in BLOCK.finditer(page)}
    after = {m.group("name"): m.group("body") for m in BLOCK.finditer(rendered)}
    return [name for name in after if before.get(name) != after[name]]
