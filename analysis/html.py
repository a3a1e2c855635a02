"""The report as one self-contained HTML page (report/index.html): readable offline and shareable
as a single file.

The figures are inside the page as base64 PNG, the style sheet inline; no script, font or
request leaves the file (links to the tables' CSV/LaTeX and the figures' SVG beside it are extras,
not needed to read it). The same content as index.md: the counts, the problems found, the figures,
every table with its note, and the environment the runs recorded.
"""

from __future__ import annotations

import base64
import re
import struct
from collections.abc import Sequence
from html import escape
from pathlib import Path

from analysis.collect import Problem
from analysis.render import Table

#: Cells that read as numbers (`1,399`, `1.15x`, `30.3%`, `-4.0%`) are right-aligned.
_NUMBER = re.compile(r"[-+]?[\d,]*\.?\d+(e[-+]?\d+)?[%x]?")
_STYLE = (
    """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px; padding: 0 1em; """
    """color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.6em; }
nav a { margin-right: 1em; }
.scroll { overflow-x: auto; margin: 0.5em 0; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #e3e3e3; white-space: nowrap; text-align: left; }
th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:hover td { background: #f7fbff; }
.note, figcaption, .files { font-size: 13px; color: #555; max-width: 60em; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
.problems li { color: #a40000; }
"""
)


def _table(table: Table, link: str | None, heading: bool = True) -> str:
    head = "".join(f"<th>{escape(str(c))}</th>" for c in table.text.columns)
    rows = []
    for values in table.text.itertuples(index=False):
        cells = (escape(str(v)) for v in values)
        rows.append(
            "<tr>"
            + "".join(f'<td class="num">{v}</td>' if _NUMBER.fullmatch(v) else f"<td>{v}</td>" for v in cells)
            + "</tr>"
        )
    title = f'<h3 id="table-{escape(table.name)}">{escape(table.title)}</h3>' if heading else ""
    parts = [
        title,
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>",
    ]
    if table.note:
        parts.append(f'<p class="note">{escape(table.note)}</p>')
    if link:
        parts.append(f'<p class="files">As <a href="{link}.csv">CSV</a>, <a href="{link}.tex">LaTeX</a>.</p>')
    return "\n".join(parts)


def _figure(name: str, png: Path, svg: Path, directory: Path) -> str:
    content = png.read_bytes()
    width, height = struct.unpack(">II", content[16:24])  # the IHDR chunk, first after the signature
    data = base64.b64encode(content).decode("ascii")
    return (
        f'<figure id="figure-{escape(name)}"><img alt="{escape(name)}" width="{width}" height="{height}" '
        f'src="data:image/png;base64,{data}"><figcaption>{escape(name)} '
        f'(<a href="{escape(svg.relative_to(directory).as_posix())}">SVG</a>)</figcaption></figure>'
    )


def html_page(
    title: str,
    summary: str,
    problems: Sequence[Problem],
    tables: Sequence[Table],
    environment: Table,
    plots: dict[str, list[Path]],
    directory: Path,
    tables_dir: str,
) -> str:
    """The page: `summary` under the title, then the problems, figures (`plots`: {name: [png, svg]}
    under `directory`), `tables` (each linked to its files in `tables_dir`) and the environment."""
    sections = [
        ("problems", "Problems", problems),
        ("figures", "Figures", plots),
        ("tables", "Tables", tables),
        ("environment", "Environment", environment.text.size),
    ]
    nav = " ".join(f'<a href="#{key}">{name}</a>' for key, name, present in sections if present)
    body = [f"<h1>{escape(title)}</h1>", f"<p>{escape(summary)}</p>", f"<nav>{nav}</nav>"]
    if problems:
        items = "".join(f"<li>{escape(p.message)}: <code>{escape(str(p.path))}</code></li>" for p in problems)
        body.append(f'<h2 id="problems">Problems</h2><ul class="problems">{items}</ul>')
    if plots:
        body.append('<h2 id="figures">Figures</h2>')
        body += [_figure(name, png, svg, directory) for name, (png, svg) in plots.items()]
    body.append('<h2 id="tables">Tables</h2>')
    body += [_table(table, f"{tables_dir}/{table.name}") for table in tables]
    if environment.text.size:
        body.append(f'<h2 id="environment">{escape(environment.title)}</h2>')
        body.append(_table(environment, None, heading=False))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{escape(title)}</title>'
        f"<style>{_STYLE}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
