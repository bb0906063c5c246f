"""The byte-level UTF-8 tokenizer of training (`workloads.data.tokenize`), with typed
errors for what it cannot map."""

from __future__ import annotations

from collections.abc import Sequence

from workloads.data.tokenize import BYTE_VOCAB_SIZE, decode_bytes, encode_bytes
from workloads.inference.errors import UnmappableInputError

#: Name of the tokenizer in model cards.
BYTE_TOKENIZER = "byte-utf8"


class ByteTokenizer:
    """Text <-> token ids, one token per UTF-8 byte (vocabulary 256)."""

    name = BYTE_TOKENIZER
    vocab_size = BYTE_VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``.

        Raises:
            UnmappableInputError: ``text`` holds characters with no UTF-8 encoding
                (lone surrogates, e.g. from a badly decoded request body).
        """
        try:
            return [int(token) for token in encode_bytes(text)]
        except UnicodeEncodeError as err:
            raise UnmappableInputError(
                f"the text has a character the byte tokenizer cannot map ({err.object[err.start]!r}"
                f" at position {err.start}: {err.reason}); send valid UTF-8 text"
            ) from err

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens`` (bytes that do not form valid UTF-8 become U+FFFD)."""
        return decode_bytes(tokens)
