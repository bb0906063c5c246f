"""One raw record to one clean document, or the rule it breaks: the per-record half of
validation and the cleaning, as plain functions (Spark's Python workers run them; the
tests call them directly).

A record is one line of a ``.txt`` file, or one line of a ``.jsonl`` file whose object
has a ``text`` string. Cleaning normalises to Unicode NFC, deletes control characters
(keeping tabs and line breaks, which become spaces and newlines) and the byte-order
mark, turns each run of whitespace into one space, or one newline when the run holds a
line break, and strips the ends. A document therefore never holds a blank line, and the
job separates documents with one (`DOCUMENT_SEPARATOR`).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass

#: Written after every document in the token stream: a blank line marks its end.
DOCUMENT_SEPARATOR = "\n\n"

OK = "ok"
#: A ``.txt`` line holding only whitespace: a paragraph break, not a document.
BLANK = "blank"
ENCODING = "encoding"
JSON = "json"
NO_TEXT = "no_text"
EMPTY = "empty"
OVERSIZED = "oversized"
#: Rules a record can break, with what each means (report order).
RECORD_RULES = {
    ENCODING: "not valid UTF-8",
    JSON: "a .jsonl line that is not a JSON object",
    NO_TEXT: "a .jsonl object without a 'text' string",
    EMPTY: "no text left after cleaning",
    OVERSIZED: "a document larger than --max-doc-bytes",
}

# Unicode's control characters (category Cc) are exactly U+0000-001F and U+007F-009F.
_CONTROL = {
    code: None for code in (*range(0x20), *range(0x7F, 0xA0)) if chr(code) not in "\t\n\r"
} | {0xFEFF: None}
_BREAKS = re.compile(r"\r\n?")
_WHITESPACE_WITH_BREAK = re.compile(r"[^\S\n]*\n\s*")
_WHITESPACE = re.compile(r"[^\S\n]+")


def clean_text(text: str) -> str:
    """NFC, control characters removed, whitespace collapsed, ends stripped."""
    text = unicodedata.normalize("NFC", text).translate(_CONTROL)
    text = _BREAKS.sub("\n", text)
    text = _WHITESPACE_WITH_BREAK.sub("\n", text)
    return _WHITESPACE.sub(" ", text).strip()


def text_hash(text: str) -> str:
    """The exact-duplicate key of a clean document (128-bit BLAKE2b)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


@dataclass(frozen=True)
class Record:
    """What one raw line became: ``status`` is `OK` or the rule it breaks."""

    status: str
    text: str | None
    raw_bytes: int
    hash: str | None


def parse_record(kind: str, raw: bytes, max_doc_bytes: int) -> Record:
    """Decode, parse (``jsonl``), size-check and clean one raw line of a ``kind`` file."""
    size = len(raw)
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Record(ENCODING, None, size, None)
    if kind == "jsonl":
        if not line.strip():
            return Record(BLANK, None, size, None)
        try:
            body = json.loads(line)
        except json.JSONDecodeError:
            return Record(JSON, None, size, None)
        if not isinstance(body, dict):
            return Record(JSON, None, size, None)
        value = body.get("text")
        if not isinstance(value, str):
            return Record(NO_TEXT, None, size, None)
        line = value
    elif not line.strip():
        return Record(BLANK, None, size, None)
    if len(line.encode("utf-8")) > max_doc_bytes:
        return Record(OVERSIZED, None, size, None)
    text = clean_text(line)
    if not text:
        return Record(EMPTY, None, size, None)
    return Record(OK, text, size, text_hash(text))
