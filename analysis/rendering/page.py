"""The report's index page twice, with its sections in one order (SECTIONS): index.md, for a
repository or a terminal, and index.html, one self-contained page readable offline and shareable as
a single file.

Both have the counts, the problems found, the figures, every table with its note, and the
environment the runs recorded. In the HTML page the figures are inside as base64 PNG, the style
sheet inline; no script, font or request leaves the file (links to the tables' CSV/LaTeX and the
figures' SVG beside it are extras, not needed to read it).
"""

from __future__ import annotations

import base64
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from analysis.rendering.text import Table, markdown

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


#: The page's sections in the order of both files: (anchor, heading).
SECTIONS = (
    ("problems", "Problems"),
    ("figures", "Figures"),
    ("tables", "Tables"),
    ("environment", "Environment"),
)


@dataclass
class Page:
    """What the index page shows."""

    title: str
    sweep_dir: Path
    count_line: str
    problems: Sequence[tuple[str, Path]]
    """What went wrong reading the sweep: (message, path) of each problem."""
    tables: Sequence[Table]
    environment: Table
    plots: dict[str, list[Path]]
    """{name: [png, svg]} under `directory`."""
    directory: Path
    tables_dir: str
    """Where each table's files lie, relative to `directory`."""

    def present(self, section: str) -> bool:
        return bool(
            {
                "problems": self.problems,
                "figures": self.plots,
                "tables": self.tables,
                "environment": self.environment.text.size,
            }[section]
        )


def markdown_page(page: Page) -> str:
    """index.md: the counts under the title, then each present section in SECTIONS' order."""
    lines = [f"# {page.title}", "", f"Sweep `{page.sweep_dir}`: {page.count_line}.", ""]
    for key, heading in SECTIONS:
        if not page.present(key):
            continue
        lines += [f"## {heading}", ""]
        if key == "problems":
            lines += [*(f"- {message}: `{path}`" for message, path in page.problems), ""]
        elif key == "figures":
            for name, paths in page.plots.items():
                png, svg = (path.relative_to(page.directory).as_posix() for path in paths)
                lines += [f"![{name}]({png})", "", f"([SVG]({svg}))", ""]
        elif key == "tables":
            for table in page.tables:
                files = ", ".join(f"[{fmt}]({page.tables_dir}/{table.name}.{fmt})" for fmt in ("csv", "tex"))
                lines += [markdown(table), "", f"As {files}.", ""]
        else:
            lines += [markdown(page.environment), ""]
    return "\n".join(lines)


def html_page(page: Page) -> str:
    """index.html: the counts under the title, a menu of the present sections, then each in
    SECTIONS' order."""
    nav = " ".join(f'<a href="#{key}">{heading}</a>' for key, heading in SECTIONS if page.present(key))
    summary = f"Sweep {page.sweep_dir}: {page.count_line}."
    body = [f"<h1>{escape(page.title)}</h1>", f"<p>{escape(summary)}</p>", f"<nav>{nav}</nav>"]
    for key, _ in SECTIONS:
        if not page.present(key):
            continue
        if key == "problems":
            items = "".join(
                f"<li>{escape(message)}: <code>{escape(str(path))}</code></li>"
                for message, path in page.problems
            )
            body.append(f'<h2 id="problems">Problems</h2><ul class="problems">{items}</ul>')
        elif key == "figures":
            body.append('<h2 id="figures">Figures</h2>')
            body += [_figure(name, png, svg, page.directory) for name, (png, svg) in page.plots.items()]
        elif key == "tables":
            body.append('<h2 id="tables">Tables</h2>')
            body += [_table(table, f"{page.tables_dir}/{table.name}") for table in page.tables]
        else:
            body.append(f'<h2 id="environment">{escape(page.environment.title)}</h2>')
            body.append(_table(page.environment, None, heading=False))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(page.title)}</title>"
        f"<style>{_STYLE}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
