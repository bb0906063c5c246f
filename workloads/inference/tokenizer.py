"""The byte-level UTF-8 tokenizer of training (`workloads.data.byte_tokenizer`), with typed
errors for what it cannot map.

It is the same mapping (one token per UTF-8 byte; a test pins the equality) written
without numpy and the shard module, so that a model server does not import torch.
"""

from __future__ import annotations

from collections.abc import Sequence

from workloads.inference.errors import UnmappableInputError

#: Name of the tokenizer in model cards.
BYTE_TOKENIZER = "byte-utf8"
BYTE_VOCAB_SIZE = 256


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
            return list(text.encode("utf-8"))
        except UnicodeEncodeError as err:
            raise UnmappableInputError(
                f"the text has a character the byte tokenizer cannot map ({err.object[err.start]!r}"
                f" at position {err.start}: {err.reason}); send valid UTF-8 text"
            ) from err

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens`` (bytes that do not form valid UTF-8 become U+FFFD)."""
        return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")
