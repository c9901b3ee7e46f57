"""CSV for spreadsheets: the one renderer every CSV export uses, and the one rule that keeps a cell from being read
as a formula (CSV injection, OWASP).

A text cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`: spreadsheets then
show it as text instead of evaluating it (a tab or CR is stripped by some importers, exposing what follows). Numbers
stay numbers: int, float and Decimal values are written as they are, and so is text that is exactly a decimal
number (`-12.50`, `+3`, `1e-6`), which a spreadsheet reads as a number and never as a formula. Everything else that
starts with a trigger character, `-1+2` or `-A1` included, is neutralised.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any

from rest_framework.renderers import BaseRenderer

FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def spreadsheet_safe(value: Any) -> Any:
    """The value as it may go into a CSV cell: formatted (Decimal in plain notation, dates in ISO 8601) and, if it
    is text a spreadsheet would evaluate, prefixed with `'`."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, int | float):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    text = value if isinstance(value, str) else str(value)
    if text.startswith(FORMULA_TRIGGERS) and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


def _writer(out: io.StringIO) -> Any:
    # RFC 4180 line ends: the writer quotes a field that contains any character of the line terminator, so with
    # "\r\n" a carriage return inside a cell is quoted too (with "\n" alone it was not, and split the row).
    return csv.writer(out, lineterminator="\r\n")


def csv_stream(rows: Iterable[dict[str, Any]], columns: tuple[str, ...], *, batch: int = 500) -> Iterator[bytes]:
    """The header and the rows as CSV bytes, a batch of rows at a time (for a StreamingHttpResponse): the same cells
    as CSVRenderer, never the whole document in memory."""
    out = io.StringIO()
    writer = _writer(out)
    writer.writerow([spreadsheet_safe(column) for column in columns])
    pending = 1
    for row in rows:
        writer.writerow([spreadsheet_safe(row.get(column, "")) for column in columns])
        pending += 1
        if pending >= batch:
            yield out.getvalue().encode()
            out.seek(0)
            out.truncate()
            pending = 0
    if pending:
        yield out.getvalue().encode()


class CSVRenderer(BaseRenderer):
    """Rows (a list of dicts, or {"rows": [...]}) as CSV with a header; other payloads (errors) as `detail` lines.
    Every cell, the header included, goes through `spreadsheet_safe`."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        rows = data.get("rows") if isinstance(data, dict) and "rows" in data else data
        out = io.StringIO()
        writer = _writer(out)
        # No rows: the view's `csv_header` alone (an empty body would also lose its Content-Type in DRF).
        header = getattr((renderer_context or {}).get("view"), "csv_header", ())
        if isinstance(rows, list) and ((rows and isinstance(rows[0], dict)) or (not rows and header)):
            columns = list(rows[0]) if rows else list(header)
            writer.writerow([spreadsheet_safe(column) for column in columns])
            for row in rows:
                writer.writerow([spreadsheet_safe(row.get(column, "")) for column in columns])
        elif isinstance(data, dict) and "detail" in data:
            writer.writerow(["detail"])
            writer.writerow([spreadsheet_safe(data["detail"])])
        return out.getvalue().encode()
