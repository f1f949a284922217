"""Display grids: a cell, a table of cells with its HTML, and the named TableSet that a report
table is (tidy numbers written as CSV, display grids written as an HTML fragment).
"""

from __future__ import annotations

import hashlib
import html
import numbers
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.formatting import fmt_bytes, fmt_count, fmt_duration, fmt_duration_pm, fmt_num


@dataclass
class Cell:
    """One table cell: its text, CSS classes, hover title and column span."""
    text: str
    css: str = ""
    title: str = ""
    span: int = 1  # columns this cell covers (a status across all value columns)


@dataclass
class GridTable:
    """One rendered table: header rows of (label, colspan) and body rows of cells."""

    caption: str
    header: list
    rows: list
    n_index: int
    row_ids: list | None = None  # an id per row (or None), so a sentence can link to its row

    def to_html(self) -> str:
        """The table as HTML (escaped; index headers span every header row)."""
        e = html.escape
        head = ""
        depth = len(self.header)
        for r, hrow in enumerate(self.header):
            ths = []
            for i, (label, span) in enumerate(hrow):
                if i < self.n_index and depth > 1:
                    if r == 0:  # index headers span every header row
                        ths.append(f"<th rowspan='{depth}'>{e(str(label))}</th>")
                    continue
                ths.append(f"<th colspan='{span}'>{e(str(label))}</th>" if span > 1 else f"<th>{e(str(label))}</th>")
            head += "<tr>" + "".join(ths) + "</tr>"
        body = []
        for k, row in enumerate(self.rows):
            tds = []
            for i, c in enumerate(row):
                kind = "idx" if i < self.n_index else ("" if "text" in c.css or "code" in c.css else "num")
                classes = " ".join(x for x in (c.css, kind) if x)
                title = f" title='{e(c.title)}'" if c.title else ""
                span = f" colspan='{c.span}'" if c.span > 1 else ""
                tds.append(f"<td class='{classes}'{title}{span}>{e(c.text)}</td>")
            rid = self.row_ids[k] if self.row_ids else None
            body.append((f"<tr id='{e(rid)}'>" if rid else "<tr>") + "".join(tds) + "</tr>")
        cap = f"<caption>{e(self.caption)}</caption>" if self.caption else ""
        return (f"<table class='grid'>{cap}<thead>{head}</thead>"
                f"<tbody>{''.join(body)}</tbody></table>")


@dataclass
class TableSet:
    """A named table: tidy numbers for the CSV, display grids for the HTML fragment."""

    name: str
    title: str
    description: str
    data: pd.DataFrame
    grids: list = field(default_factory=list)
    empty_text: str = "No data for this table."
    body: str | None = None  # a ready-made fragment instead of grids (the deadlock report)

    def html(self) -> str:
        """The HTML fragment: the grids, the ready-made body or the empty text."""
        if self.body is not None:
            return self.body
        if not self.grids:
            return f"<p class='muted'>{html.escape(self.empty_text)}</p>"
        return "\n".join(f"<div class='table-wrap'>{g.to_html()}</div>" for g in self.grids)

    def write(self, out_dir: Path) -> list:
        """Write NAME.csv and NAME.html into `out_dir`; return both paths."""
        out_dir = Path(out_dir)
        self.data.to_csv(out_dir / f"{self.name}.csv", index=False)
        (out_dir / f"{self.name}.html").write_text(
            f"<h3>{html.escape(self.title)}</h3>\n<p>{html.escape(self.description)}</p>\n{self.html()}\n")
        return [out_dir / f"{self.name}.csv", out_dir / f"{self.name}.html"]


def value_cell(p, value: str, fmt=fmt_num, scale: float = 1.0) -> Cell:
    """A grid point's mean ± CI, or its status when no repeat ended ok."""
    title = f"rerun: {p['command']}" if p.get("command") else ""
    if p["n_ok"] == 0:
        return Cell(p["statuses"], css=f"status status-{p['worst_status']}", title=title)
    m, ci = p[f"{value}_mean"] * scale, p[f"{value}_ci95"] * scale
    if fmt is fmt_duration:
        text = fmt_duration_pm(m, ci)
    else:
        text = fmt(m)
        if not pd.isna(ci):
            text += f" ± {fmt(ci) if fmt is not fmt_num else fmt_num(ci, ref=m)}"
    if p["n_ok"] < p["n_runs"]:
        text += f" ({p['n_runs'] - p['n_ok']} of {p['n_runs']} not ok)"
    return Cell(text, title=title)


def row_anchor(table: str, experiment=None, *keys) -> str:
    """The id of a table row: 'speed-3fa9c1-sage-2-128-0' (the experiment as a short hash, since
    its label is long), so sentences elsewhere can link to the row their number comes from."""
    parts = [table]
    if experiment is not None:
        parts.append(hashlib.sha1(str(experiment).encode()).hexdigest()[:6])
    parts += [re.sub(r"[^A-Za-z0-9_.]+", "_", str(k)) for k in keys]
    return "-".join(parts)


def index_cells(values, previous) -> list:
    """Index cells, blanking leading values repeated from the row above (paper style)."""
    cells, same = [], True
    for v, prev in zip(values, previous or [None] * len(values)):
        same = same and previous is not None and v == prev
        cells.append(Cell("" if same else v, css="idx-cont" if same else ""))
    return cells


def _human(column: str, v) -> str:
    """A number in its column's unit: seconds ('_s') as ms/s/min, bytes ('_bytes') as MiB/GiB,
    other floats to three digits, large counts as k/M."""
    if column.endswith("_s"):
        return fmt_duration(v)
    if column.endswith("_bytes"):
        return fmt_bytes(v)
    if isinstance(v, float):
        return fmt_num(v)
    return fmt_count(v)


def _frame_cells(rec: dict, columns, code_cols, status_col) -> list:
    cells = []
    for c in columns:
        v = rec[c]
        text = "—" if v is None or (isinstance(v, float) and pd.isna(v)) else (
            _human(c, v) if isinstance(v, numbers.Number) and not isinstance(v, bool) else str(v))
        css = "code" if c in code_cols else ("" if isinstance(v, numbers.Number) and not isinstance(v, bool) else "text")
        if c == status_col:
            css = f"status status-{v}"
        cells.append(Cell(text, css=css))
    return cells


def frame_table(df: pd.DataFrame, name: str, title: str, description: str, code_cols=(), status_col=None,
                empty_text="Nothing to list.", group_col=None, row_id=None) -> TableSet:
    """A plain frame as a TableSet: one grid, or with `group_col` one grid per value of that
    column, captioned by it (so a long experiment label is said once, not in every row);
    `row_id`: each row's id, as a function of its record or a sequence in the frame's order."""
    if df.empty:
        return TableSet(name, title, description, df, [], empty_text=empty_text)
    columns = [c for c in df.columns if c != group_col]
    groups = df.groupby(group_col, sort=False) if group_col else [("", df)]
    ids = None if row_id is None or callable(row_id) else dict(zip(df.index, row_id))
    grids = []
    for caption, g in groups:
        recs = g.to_dict("records")
        rows = [_frame_cells(rec, columns, code_cols, status_col) for rec in recs]
        row_ids = [ids[i] for i in g.index] if ids else [row_id(rec) for rec in recs] if row_id else None
        grids.append(GridTable(str(caption), [[(c, 1) for c in columns]], rows, n_index=0, row_ids=row_ids))
    return TableSet(name, title, description, df, grids)
