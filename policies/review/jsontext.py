"""Writing JSON as ``json.dumps(value, indent=2)`` writes it, to a file a piece at a time.

The report of a review of 100,000 resources is 40 MB of JSON. ``json.dumps`` with an
indent builds it with the standard library's pure-Python encoder (its C encoder only
writes without indentation), and the whole text sits in memory beside the report's
data until it is written. Written here, the text is the same to the byte and is
flushed every megabyte.
"""

from __future__ import annotations

import math
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import IO, Any

INDENT = "  "
FLUSH = 1 << 20


def write_json(path: Path, value: Any) -> None:
    """``json.dumps(value, indent=2) + "\\n"`` written to ``path`` (UTF-8)."""
    with path.open("w", encoding="utf-8") as file:
        out = _Out(file)
        _value(value, "\n", out)
        out.add("\n")
        out.flush()


class _Out:
    def __init__(self, file: IO[str]) -> None:
        self.file = file
        self.parts: list[str] = []
        self.size = 0

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if self.size > FLUSH:
            self.flush()

    def flush(self) -> None:
        self.file.write("".join(self.parts))
        self.parts.clear()
        self.size = 0


def _value(value: Any, newline: str, out: _Out) -> None:
    """``value`` as the standard encoder writes it at the indent ``newline`` ends with
    (the same order of type checks: a bool is not written as an int)."""
    if isinstance(value, str):
        out.add(encode_basestring_ascii(value))
    elif value is None:
        out.add("null")
    elif value is True:
        out.add("true")
    elif value is False:
        out.add("false")
    elif isinstance(value, int):
        out.add(int.__repr__(value))
    elif isinstance(value, float):
        out.add(_float(value))
    elif isinstance(value, list | tuple):
        if not value:
            out.add("[]")
            return
        inner = newline + INDENT
        separator = "[" + inner
        for item in value:
            out.add(separator)
            separator = "," + inner
            _value(item, inner, out)
        out.add(newline + "]")
    elif isinstance(value, dict):
        if not value:
            out.add("{}")
            return
        inner = newline + INDENT
        separator = "{" + inner
        for key, item in value.items():
            out.add(separator + _key(key) + ": ")
            separator = "," + inner
            _value(item, inner, out)
        out.add(newline + "}")
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return encode_basestring_ascii(key)
    if isinstance(key, float):
        return encode_basestring_ascii(_float(key))
    if key is True or key is False or key is None:
        return f'"{ {True: "true", False: "false", None: "null"}[key] }"'
    if isinstance(key, int):
        return f'"{int.__repr__(key)}"'
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
