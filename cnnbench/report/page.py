"""``index.html``: one self-contained page per results set (tables, every chart, the environment).

Opened from disk, mailed, or attached to a paper's artefacts, it needs nothing else: the charts are the
report's SVGs inlined as data URIs (matplotlib writes glyphs as paths, so no font is fetched), the
style sheet is inline, and there is no script. It shows the summary tables, every chart with its
notes, the charts that were not drawn and why, the environment the rows record (framework versions,
device, driver, git sha, Python, host), and, for rows from emulated CPU devices, the warning that
they prove the code path, not hardware scaling.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from cnnbench.report.figure import EMULATED_NOTE
from cnnbench.table.spread import NOISY_HEADING

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
       padding: 0 1rem; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0 1rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1rem 0 2rem; } figure img { max-width: 100%; height: auto; }
figcaption { font-size: 0.85rem; color: #444; white-space: pre-line; }
.warning { background: #fff4e5; border-left: 4px solid #e08214; padding: 0.5rem 1rem; }
.muted { color: #666; font-size: 0.85rem; }
"""


def _esc(value: Any) -> str:
    return html.escape("" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value))


def markdown_html(text: str) -> str:
    """The Markdown that summary.md and ablation.md hold, as HTML: pipe tables, ``#`` headings (one level
    under the page's own), ``- `` bullet lists, other lines as paragraphs."""
    out: list[str] = []
    rows: list[list[str]] = []
    items: list[str] = []

    def flush() -> None:
        if rows:
            out.append(_table_html(rows))
            rows.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{_esc(item)}</li>" for item in items) + "</ul>")
            items.clear()

    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-:") for c in cells):
                rows.append(cells)
            continue
        if line.startswith("- "):
            if rows:
                flush()
            items.append(line[2:])
            continue
        flush()
        heading = re.match(r"(#{1,4}) (.*)", line)
        if heading:
            level = min(len(heading.group(1)) + 2, 6)
            out.append(f"<h{level}>{_esc(heading.group(2))}</h{level}>")
        elif line.strip():
            out.append(f"<p>{_esc(line)}</p>")
    flush()
    return "\n".join(out)


def _table_html(rows: list[list[str]]) -> str:
    head, *body = rows
    lines = ["<tr>" + "".join(f"<th>{_esc(c)}</th>" for c in head) + "</tr>"]
    for row in body:
        lines.append("<tr>" + "".join(
            f'<td class="num">{_esc(c)}</td>' if _numeric(c) else f"<td>{_esc(c)}</td>" for c in row) + "</tr>")
    return "<table>" + "".join(lines) + "</table>"


def _numeric(cell: str) -> bool:
    return bool(cell) and cell.lstrip("+-").replace(",", "").replace(".", "").rstrip("x%").isdigit()


def frame_table(frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{_esc(c)}</th>" for c in frame.columns)
    body = "".join("<tr>" + "".join(f"<td>{_esc(v)}</td>" for v in row) + "</tr>"
                   for row in frame.itertuples(index=False))
    return f"<table><tr>{head}</tr>{body}</table>"


def environment(frame: pd.DataFrame) -> pd.DataFrame:
    """One line per backend and device: versions, device, driver, git sha, Python, host."""
    frame = frame.copy()
    # rows of GPU runs carry the driver in stack_versions (nvidia-driver=...); older rows do not
    driver = frame["stack_versions"].fillna("").str.extract(r"nvidia-driver=([^;]+)")[0]
    frame["driver"] = driver.fillna("not recorded")
    keys = ["backend", "backend_version", "stack_versions", "device_type", "device_name", "driver",
            "git_sha", "python", "host"]
    env = frame[keys].astype(str).replace({"<NA>": "", "nan": "", "None": ""}).drop_duplicates()
    return env.sort_values(keys).reset_index(drop=True)


def _chart(path: Path, name: str, notes: Sequence[str]) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    caption = "".join(f"\n{note}" for note in notes)  # white-space: pre-line keeps one note a line
    return (f'<figure id="{_esc(name)}"><img alt="{_esc(name)} chart" src="data:image/svg+xml;base64,{data}">'
            f"<figcaption><b>{_esc(name)}</b>{_esc(caption)}</figcaption></figure>")



def render(report: Any, frame: pd.DataFrame, sources: Sequence[Path]) -> str:
    title = f"cnnbench results: {report.out_dir.name}"
    parts = [f"<h1>{_esc(title)}</h1>",
             f'<p class="muted">{len(frame)} ok rows from {", ".join(_esc(Path(p).name) for p in sources)}; '
             f"{_esc(frame['timestamp_utc'].min())} to {_esc(frame['timestamp_utc'].max())}</p>"]
    if (frame["device_type"] == "cpu-emulated").any():
        parts.append(f'<p class="warning"><b>Some rows ran on emulated CPU devices</b> ({EMULATED_NOTE}): every '
                     "emulated device shares the same CPU cores, so these rows prove that the parallel code path "
                     "is right; their throughput and efficiency say nothing about hardware scaling.</p>")
    parts.append("<h2>Summary</h2>")
    summary = report.out_dir / "summary.md"
    noisy = ""
    if "summary" in report.files and summary.is_file():
        # the noisy-measurement list can be long: a count up here, the list itself after the charts
        table, _, noisy = summary.read_text().partition(NOISY_HEADING.strip())
        parts.append(markdown_html(table))
        if noisy:
            parts.append(f'<p class="warning">{noisy.count(chr(10) + "- ")} measurements spread too much to be '
                         'trusted: they are listed under Noisy measurements, after the charts.</p>')
    ablation = report.out_dir / "ablation.md"
    if "ablation_table" in report.files and ablation.is_file():
        parts += ["<h3>Ablation</h3>", markdown_html(ablation.read_text())]
    parts.append("<h2>Charts</h2>")
    for name, paths in report.files.items():
        svg = [p for p in paths if p.suffix == ".svg"]
        if svg:
            parts.append(_chart(svg[0], name, report.notes.get(name, ())))
    if report.not_drawn:
        items = "".join(f"<li><b>{_esc(k)}</b>: {_esc(v)}</li>" for k, v in report.not_drawn.items())
        parts.append(f"<p>Not drawn:</p><ul>{items}</ul>")
    if noisy:
        parts += ['<h2 id="noisy">Noisy measurements</h2>', markdown_html(noisy)]
    parts += ["<h2>Environment</h2>", frame_table(environment(frame))]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_esc(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n")


def write_index(report: Any, frame: pd.DataFrame, sources: Sequence[Path]) -> Path:
    path = report.out_dir / "index.html"
    path.write_text(render(report, frame, sources), encoding="utf-8")
    report.files["index"] = [path]
    return path
