"""Reading a large JSON document a piece at a time: the members of its top-level object,
and the items of one array member one by one, from a file read in chunks.

The review reads plan files of 100,000 resources (a few hundred MB of JSON): parsed
whole, the text and the parsed document are both in memory at the peak, and the
parsed steps once more while they are decoded. Read here, only one chunk of text and
one step are held besides what the caller keeps of each step. Anything this reader
does not expect (the top level is not an object, a member repeats, the array is not
one, the text is not JSON) raises `NotStreamable`: the caller then reads the file the
ordinary way, whose error names the line and column.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import IO, Any

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
#: How much text is read at a time (a value that does not fit gets a larger read).
CHUNK = 1 << 20


class NotStreamableError(ValueError):
    """The document is not what `members` reads piece by piece."""


class _Text:
    """The text of a file, read a chunk at a time, with a position in it."""

    def __init__(self, file: IO[str]) -> None:
        self.file = file
        self.buffer = ""
        self.at = 0
        self.done = False

    def more(self) -> None:
        """Drop what was read and add the next chunk (at least as much again as what is
        left, so that a long value takes a few reads, not one per chunk)."""
        chunk = self.file.read(max(CHUNK, len(self.buffer) - self.at))
        self.buffer = self.buffer[self.at :] + chunk
        self.at = 0
        self.done = not chunk

    def peek(self) -> str:
        """The next character after white space; "" at the end of the file."""
        while True:
            self.at = _SPACE.match(self.buffer, self.at).end()  # type: ignore[union-attr]
            if self.at < len(self.buffer):
                return self.buffer[self.at]
            if self.done:
                return ""
            self.more()

    def take(self, char: str) -> None:
        if self.peek() != char:
            raise NotStreamableError(f"expected {char!r}")
        self.at += 1

    def value(self) -> Any:
        """The JSON value that starts here."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buffer, self.at)
            except json.JSONDecodeError:
                if self.done:
                    raise NotStreamableError("not JSON") from None
                self.more()
                continue
            if end == len(self.buffer) and not self.done:
                self.more()  # a number at the end of a chunk may go on in the next
                continue
            self.at = end
            return value


def members(
    file: IO[str], streamed: str, each: Callable[[int, Any], None]
) -> Iterator[tuple[str, Any]]:
    """(name, value) of each member of the file's top-level object, in order, except
    the array member ``streamed``, whose items go to ``each(index, item)`` one by one as
    they are read (its value is then the number of items). `NotStreamableError` where
    the document is not such an object."""
    text = _Text(file)
    text.take("{")
    seen: set[str] = set()
    if text.peek() == "}":
        raise NotStreamableError("an empty object")
    while True:
        name = text.value()
        if not isinstance(name, str) or name in seen:
            raise NotStreamableError("a member's name")
        seen.add(name)
        text.take(":")
        if name == streamed and text.peek() == "[":
            yield name, _items(text, each)
        else:
            yield name, text.value()
        if text.peek() == "}":
            text.take("}")
            break
        text.take(",")
    if text.peek() != "":
        raise NotStreamableError("text after the document")


def _items(text: _Text, each: Callable[[int, Any], None]) -> int:
    text.take("[")
    if text.peek() == "]":
        text.take("]")
        return 0
    count = 0
    while True:
        each(count, text.value())
        count += 1
        if text.peek() == "]":
            text.take("]")
            return count
        text.take(",")
