"""Selector errors, and the runtime's error text turned into their messages and positions."""

from __future__ import annotations

import re

from core.errors import PortalError


class CelError(PortalError, ValueError):
    """A selector was rejected or failed. `line`/`column` are 1-based (None when the error has no position)."""

    def __init__(
        self, message: str, *, expression: str = "", line: int | None = None, column: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.expression = expression
        self.line = line
        self.column = column

    def pointer(self) -> str:
        """The offending source line with a caret under the column; empty when there is no position."""
        if self.line is None or self.column is None:
            return ""
        lines = self.expression.split("\n")
        if not 1 <= self.line <= len(lines):
            return ""
        source = lines[self.line - 1]
        indent = "".join("\t" if char == "\t" else " " for char in source[: self.column - 1])
        return f"{source}\n{indent}^"

    def __str__(self) -> str:
        if self.line is None:
            return self.message
        return f"line {self.line}, column {self.column}: {self.message}\n{self.pointer()}".rstrip("\n")


class CelCompileError(CelError):
    """The expression does not parse or type-check, or does not evaluate to bool."""


class CelLimitError(CelError):
    """The expression is too long or its estimated cost exceeds MAX_COST."""


class CelRuntimeError(CelError):
    """Evaluating the expression against a device failed (Kubernetes reports this; it is not a non-match)."""


# Compile errors: "INVALID_ARGUMENT: ERROR: <input>:2:6: undeclared reference to 'foo' (in container '')\n | ..."
_COMPILE_ERROR_RE = re.compile(r"ERROR: <input>:(\d+):(\d+): (.*?)(?:\n \||\Z)", re.DOTALL)
_STATUS_PREFIX_RE = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX_RE = re.compile(r"\s*\[[A-Z_]+\]\s*$")


def compile_error(raw: str, expression: str) -> CelCompileError:
    found = _COMPILE_ERROR_RE.findall(raw)
    if not found:
        message = _STATUS_SUFFIX_RE.sub("", _STATUS_PREFIX_RE.sub("", raw.strip()))
        return CelCompileError(message or "invalid expression", expression=expression)
    line, column, message = found[0]
    message = _STATUS_SUFFIX_RE.sub("", message.replace(" (in container '')", "").strip())
    if len(found) > 1:
        message += f" (and {len(found) - 1} more error{'s' if len(found) > 2 else ''})"
    return CelCompileError(message, expression=expression, line=int(line), column=int(column))


def runtime_message(raw: str) -> str:
    message = _STATUS_SUFFIX_RE.sub("", _STATUS_PREFIX_RE.sub("", str(raw).strip()))
    if message.startswith("Key not found in map : "):
        return "no such key: " + message.removeprefix("Key not found in map : ")
    if message.startswith("No matching overloads found : "):
        return "no matching overload for " + message.removeprefix("No matching overloads found : ")
    return message


def source_position(offset: int | None, expression: str) -> tuple[int | None, int | None]:
    if offset is None:
        return None, None
    before = expression[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1
