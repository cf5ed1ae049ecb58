"""A copy of an experiment spec with some fields changed, for the benchmark scripts.

``write_variant(BASE, DEST, {"name": "x", "torch.compile_scope": "model"})`` reads BASE, sets each
dotted field (creating its table where needed; ``None`` removes the field) and writes DEST; the
spec's own validation runs when `cnnbench` reads DEST. Command line:
``python benchmarks/spec_variant.py BASE DEST KEY=VALUE... [del:KEY...]`` with VALUE in TOML syntax
(``torch.compile_mode='"reduce-overhead"'``, ``per_device_batch=512``).
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} to TOML")


def to_toml(table: dict[str, Any]) -> str:
    """Scalars and lists at the top, then one [section] per sub-table (specs nest one level)."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for name, sub in table.items():
        if isinstance(sub, dict):
            lines += ["", f"[{name}]"] + [f"{k} = {_toml_value(v)}" for k, v in sub.items()]
    return "\n".join(lines) + "\n"


def write_variant(base: Path, dest: Path, changes: dict[str, Any]) -> Path:
    table = tomllib.loads(Path(base).read_text())
    for dotted, value in changes.items():
        *sections, key = dotted.split(".")
        target = table
        for section in sections:
            target = target.setdefault(section, {})
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(to_toml(table))
    return dest


def main(argv: list[str]) -> None:
    base, dest, *assignments = argv
    changes = {}
    for text in assignments:
        if text.startswith("del:"):
            changes[text[4:]] = None
            continue
        key, _, value = text.partition("=")
        changes[key] = tomllib.loads(f"v = {value}")["v"]
    write_variant(Path(base), Path(dest), changes)


if __name__ == "__main__":
    main(sys.argv[1:])
