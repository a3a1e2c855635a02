"""Tables as text: Markdown, LaTeX (booktabs), CSV and JSON, and the number formats they share.

A `Table` carries two frames: `data`, the raw numbers (what CSV and JSON get: a machine reads them), and
`text`, the same content formatted for people (what Markdown and LaTeX get). They need not have
the same shape: a "μ ± σ" cell of `text` is two columns of `data`.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workloads.contract.vocabulary import ACCURACY_FAIL


@dataclass
class Table:
    """One table of the analysis: `name` is its file stem in report/tables/."""

    name: str
    title: str
    data: pd.DataFrame
    text: pd.DataFrame
    note: str = ""
    compact: Table | None = None
    """The same table narrowed to fit a terminal (the per-cell table's), printed unless the full one is
    asked for; its `data` is this table's."""


def is_null(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, (float, np.floating)) and math.isnan(value))


def fmt_number(value: Any) -> str:
    """A measurement with as many decimals as its size deserves ('' for null)."""
    if is_null(value):
        return ""
    value = float(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"


def fmt_percent(fraction: Any, digits: int = 1) -> str:
    return "" if is_null(fraction) else f"{100 * float(fraction):.{digits}f}%"


def fmt_accuracy(
    result: Any,
    diff: Any,
    floor: Any,
    worst: Any = None,
    limit: Any = None,
    measure: Any = None,
    full: bool = False,
) -> str:
    """`pass (2.3e-07; eager 0)`: an accuracy check's result, its worst quantity's error and eager's
    own; on a fail (and with `full`) the quantity, its measure and its limit, `fail_accuracy
    (h.1.ln_1.weight.grad norm_ratio 1.00 > 0.001; eager 2e-07)`; the result alone where the check
    failed to run. Sweeps before the per-tensor check have no tensor: their difference is the losses';
    sweeps before issue 50 no measure."""
    if is_null(result) or is_null(diff):
        return "" if is_null(result) else str(result)
    if is_null(worst) or not (full or result == ACCURACY_FAIL):
        return f"{result} ({fmt_number(diff)}; eager {fmt_number(floor)})"
    named = worst if is_null(measure) else f"{worst} {measure}"
    relation = "≤" if float(diff) <= float(limit) else ">"
    return f"{result} ({named} {fmt_number(diff)} {relation} {fmt_number(limit)}; eager {fmt_number(floor)})"


def fmt_count(value: Any) -> str:
    """A whole number ('' for null)."""
    return "" if is_null(value) else str(int(value))


def fmt_percent_interval(fraction: Any, low: Any = None, high: Any = None) -> str:
    """`97.4% [97.1, 97.5]`, or `97.4%` without an interval."""
    if is_null(fraction):
        return ""
    interval = "" if is_null(low) or is_null(high) else f" [{100 * float(low):.1f}, {100 * float(high):.1f}]"
    return f"{fmt_percent(fraction)}{interval}"


def fmt_interval(value: Any, low: Any = None, high: Any = None) -> str:
    """`12.3 [12.1, 12.6]` (each as `fmt_number`), or `12.3` without an interval."""
    if is_null(value):
        return ""
    interval = "" if is_null(low) or is_null(high) else f" [{fmt_number(low)}, {fmt_number(high)}]"
    return f"{fmt_number(value)}{interval}"


def fmt_change(fraction: Any) -> str:
    """A relative change with its sign: +12.3%, -4.0%."""
    return "" if is_null(fraction) else f"{100 * float(fraction):+.1f}%"


def fmt_break_even(value: Any, pays_off: Any, whole: bool = False) -> str:
    """Steps (`whole`: `1,750`) or minutes (`0.29`) until compiling pays for itself: `never` where it
    does not pay off (`pays_off` false: the compiled step is not faster), '' where unknown."""
    if pays_off is False:
        return "never"
    return "" if is_null(value) else f"{float(value):,.0f}" if whole else fmt_number(value)


def fmt_warm(text: str, warm: Any) -> str:
    """`text (warm)` where `warm` is true: the number rests on a compile that found an earlier
    compile's entries in its cache (analysis/cells/breakeven.py `compile_warmth`)."""
    return f"{text} (warm)" if text and not is_null(warm) and bool(warm) else text


def fmt_speedup(value: Any, low: Any = None, high: Any = None, digits: int = 2) -> str:
    """`1.23x [1.20, 1.26]`, or `1.23x` without an interval."""
    if is_null(value):
        return ""
    interval = (
        "" if is_null(low) or is_null(high) else f" [{float(low):.{digits}f}, {float(high):.{digits}f}]"
    )
    return f"{float(value):.{digits}f}x{interval}"


def _fmt_plain(value: Any) -> str:
    if is_null(value):
        return ""
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def render_markdown(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A GitHub-flavoured Markdown table of `rows` (dicts) with aligned columns."""
    cells = [[_fmt_plain(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    line = lambda values: "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths]), *map(line, cells)])


#: Width of a note's lines under a Markdown table: notes run to 600 characters, one line each
#: wrapped mid-word by a terminal; Markdown joins the wrapped lines again.
NOTE_WIDTH = 110


def wrap_note(note: str) -> str:
    """Each line of a note wrapped at NOTE_WIDTH (a list item's continuation indented), words kept whole."""
    return "\n".join(
        textwrap.fill(
            line,
            NOTE_WIDTH,
            subsequent_indent="  " if line.startswith("- ") else "",
            break_long_words=False,
            break_on_hyphens=False,
        )
        if len(line) > NOTE_WIDTH
        else line
        for line in note.splitlines()
    )


def markdown(table: Table) -> str:
    """The table under a `###` heading, its note below."""
    columns = list(table.text.columns)  # none: a table that only says why it is empty (its note)
    body = render_markdown(table.text.to_dict("records"), columns) if columns else ""
    note = wrap_note(table.note) if table.note else ""
    return "\n\n".join(part for part in (f"### {table.title}", body, note) if part)


#: Characters that LaTeX treats specially, and text symbols outside plain LaTeX's fonts.
_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
          "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
          "μ": r"$\mu$", "σ": r"$\sigma$", "±": r"$\pm$", "≥": r"$\geq$", "×": r"$\times$", "—": "---",
          "–": "--", "−": "-", "Δ": r"$\Delta$", "…": r"\ldots{}"}  # fmt: skip


def latex_escape(text: str) -> str:
    return "".join(_LATEX.get(char, char) for char in text)


def latex(table: Table) -> str:
    """A booktabs `table` environment with the title as caption and the note below the tabular."""
    columns = list(table.text.columns)
    row = lambda values: " & ".join(latex_escape(str(v)) for v in values) + r" \\"  # noqa: E731
    lines = [
        r"\begin{table}[ht]",
        r"\centering",
        rf"\caption{{{latex_escape(table.title)}}}",
        rf"\begin{{tabular}}{{{'l' * len(columns)}}}",
        r"\toprule",
        row(columns),
        r"\midrule",
        *(row(values) for values in table.text.itertuples(index=False)),
        r"\bottomrule",
        r"\end{tabular}",
    ]
    if table.note:
        lines.append(rf"\par\smallskip\footnotesize {latex_escape(table.note)}")
    return "\n".join([*lines, r"\end{table}"])


def csv(table: Table) -> str:
    """The raw numbers as CSV (fractions as fractions, times in the unit the column names)."""
    return table.data.to_csv(index=False)


def json_records(table: Table) -> str:
    """The raw numbers as a JSON array, one object per row (null where a value is missing)."""
    return table.data.to_json(orient="records", double_precision=15) + "\n"


RENDERERS: dict[str, Callable[[Table], str]] = {
    "markdown": markdown,
    "latex": latex,
    "csv": csv,
    "json": json_records,
}
#: The formats that print one table, the per-cell one, with its raw numbers (others print every table).
ONE_TABLE = ("csv", "json")
