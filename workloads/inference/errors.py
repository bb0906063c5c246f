"""The inference library's typed errors: each message says what to change.

A model server maps `InvalidInputError` and its subclasses to HTTP 400/413/422 and
`ExportError` to a failed start-up; neither carries a traceback to the user.
"""

from __future__ import annotations


class InferenceError(Exception):
    """Base of every error this library raises on purpose."""


class ExportError(InferenceError):
    """An export directory (or a checkpoint to export) that cannot be used."""


class InvalidInputError(InferenceError, ValueError):
    """A request the model cannot serve (bad arguments, ragged batch, empty prompt)."""


class ContextLengthError(InvalidInputError):
    """A prompt (plus the tokens to generate) longer than the model's context.

    Args:
        length: tokens the request needs.
        limit: the model's context length.
    """

    def __init__(self, length: int, limit: int) -> None:
        self.length = length
        self.limit = limit
        super().__init__(
            f"the request needs {length} tokens but the model's context is {limit}; "
            "shorten the prompt or ask for fewer new tokens"
        )


class UnmappableInputError(InvalidInputError):
    """Text the tokenizer cannot encode, or token ids outside the vocabulary."""
