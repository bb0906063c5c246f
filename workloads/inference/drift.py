"""Input drift of a served language model: how far live prompts have moved from the data
the model was trained on.

Two statistics, per model version, over a sliding window of the latest prompts:

- ``token_js``: the Jensen-Shannon distance (base 2, in [0, 1]) between the window's
  token distribution and the training data's, computed by SciPy
  (`scipy.spatial.distance.jensenshannon`);
- ``prompt_length_psi``: the population stability index of the prompt-length
  distribution over fixed bins, ``sum((live - ref) * ln(live / ref))``, the banking
  industry's drift score (0.1 moderate, 0.25 large shift). No light maintained library
  computes it (Evidently and alibi-detect do, with dependency trees larger than this
  whole server: pandas/plotly, TensorFlow), so it is these few lines, smoothed the same
  way as the token distribution.

The reference is stored with the model version (``drift_reference.json`` beside the
ONNX files, written at export time and attached at registration) so the statistics
compare against exactly the data that model saw.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from workloads.data.shard_format import HEADER_BYTES, read_header, shard_files

REFERENCE_FILE = "drift_reference.json"
#: Upper edges of the prompt-length bins (tokens); the last bin is open.
LENGTH_EDGES: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512)
#: Added to every bin before normalising: an empty bin must not make PSI infinite.
SMOOTHING = 0.5
STATISTICS = ("token_js", "prompt_length_psi")


class DriftReferenceError(ValueError):
    """A drift reference that cannot be read or built."""


@dataclass(frozen=True)
class DriftReference:
    """Token and prompt-length distributions of the training data.

    Args:
        vocab_size: token ids are in ``[0, vocab_size)``.
        token_counts: occurrences of each token id in the reference data.
        length_counts: prompts per length bin (``LENGTH_EDGES``, plus the open last bin).
        source: where the reference came from (for the model card and the guide).
    """

    vocab_size: int
    token_counts: tuple[int, ...]
    length_counts: tuple[int, ...]
    source: str

    def to_json(self) -> str:
        return json.dumps(
            {
                "vocab_size": self.vocab_size,
                "length_edges": list(LENGTH_EDGES),
                "token_counts": list(self.token_counts),
                "length_counts": list(self.length_counts),
                "source": self.source,
            },
            indent=1,
        )

    @classmethod
    def read(cls, path: Path) -> DriftReference:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            reference = cls(
                vocab_size=int(data["vocab_size"]),
                token_counts=tuple(int(c) for c in data["token_counts"]),
                length_counts=tuple(int(c) for c in data["length_counts"]),
                source=str(data.get("source", "")),
            )
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise DriftReferenceError(f"{path}: not a drift reference ({err})") from err
        if list(data.get("length_edges", [])) != list(LENGTH_EDGES):
            raise DriftReferenceError(f"{path}: length bins differ from this server's")
        if len(reference.token_counts) != reference.vocab_size:
            raise DriftReferenceError(f"{path}: token_counts must have vocab_size entries")
        return reference


def length_bin(length: int) -> int:
    """Index of the prompt-length bin of ``length`` tokens."""
    return int(np.searchsorted(np.asarray(LENGTH_EDGES), length, side="left"))


def build_reference(
    prompts: Iterable[Sequence[int]], vocab_size: int, source: str
) -> DriftReference:
    """The reference of ``prompts`` (token-id sequences, e.g. the training corpus's
    documents)."""
    tokens = np.zeros(vocab_size, dtype=np.int64)
    lengths = np.zeros(len(LENGTH_EDGES) + 1, dtype=np.int64)
    for prompt in prompts:
        if not prompt:
            continue
        ids = np.asarray(prompt, dtype=np.int64)
        tokens += np.bincount(ids, minlength=vocab_size)[:vocab_size]
        lengths[length_bin(len(prompt))] += 1
    if lengths.sum() == 0:
        raise DriftReferenceError("no non-empty prompts to build a drift reference from")
    return DriftReference(vocab_size, tuple(tokens.tolist()), tuple(lengths.tolist()), source)


def _distribution(counts: npt.ArrayLike) -> npt.NDArray[np.float64]:
    smoothed = np.asarray(counts, dtype=np.float64) + SMOOTHING
    out: npt.NDArray[np.float64] = smoothed / smoothed.sum()
    return out


def psi(reference: npt.ArrayLike, live: npt.ArrayLike) -> float:
    """Population stability index of two count vectors over the same bins."""
    ref, cur = _distribution(reference), _distribution(live)
    return float(np.sum((cur - ref) * np.log(cur / ref)))


class DriftWindow:
    """The latest ``window`` prompts of one model version and their drift scores.

    Not thread-safe: the server updates it from its event loop only.
    """

    def __init__(self, reference: DriftReference, window: int = 500) -> None:
        if window < 1:
            raise ValueError(f"the drift window must hold at least one prompt, got {window}")
        self.reference = reference
        self._prompts: deque[tuple[npt.NDArray[np.int64], int]] = deque()
        self._window = window
        self._tokens = np.zeros(reference.vocab_size, dtype=np.int64)
        self._lengths = np.zeros(len(LENGTH_EDGES) + 1, dtype=np.int64)
        self._ref_tokens = _distribution(reference.token_counts)

    def __len__(self) -> int:
        return len(self._prompts)

    def add(self, prompt: Sequence[int]) -> None:
        """Count one live prompt, forgetting the oldest beyond the window."""
        if not prompt:
            return
        ids = np.asarray(prompt, dtype=np.int64)
        counts = np.bincount(ids, minlength=self.reference.vocab_size)[: self.reference.vocab_size]
        bin_index = length_bin(len(prompt))
        self._prompts.append((counts, bin_index))
        self._tokens += counts
        self._lengths[bin_index] += 1
        if len(self._prompts) > self._window:
            old_counts, old_bin = self._prompts.popleft()
            self._tokens -= old_counts
            self._lengths[old_bin] -= 1

    def scores(self) -> dict[str, float]:
        """``token_js`` and ``prompt_length_psi`` of the window (empty: both 0)."""
        # Imported here: writing a reference at export time needs no SciPy.
        from scipy.spatial.distance import jensenshannon  # noqa: PLC0415

        if not self._prompts:
            return dict.fromkeys(STATISTICS, 0.0)
        js = jensenshannon(self._ref_tokens, _distribution(self._tokens), base=2)
        return {
            "token_js": float(js),
            "prompt_length_psi": psi(self.reference.length_counts, self._lengths),
        }


def corpus_prompts(corpus: Path) -> list[list[int]]:
    """The documents (non-empty lines) of a UTF-8 corpus as byte-token prompts, the way
    the byte tokenizer of training encodes them."""
    try:
        text = corpus.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DriftReferenceError(f"{corpus}: cannot read the corpus ({err})") from err
    return [list(line.encode("utf-8")) for line in text.splitlines() if line.strip()]


def shard_prompts(data_dir: Path, newline: int = 10) -> list[list[int]]:
    """The documents of a byte-level training set (``train_*.bin`` shards of
    `workloads.data.shards`), split at newlines: what the model was trained on."""
    prompts: list[list[int]] = []
    for path in shard_files(data_dir, "train"):
        read_header(path)  # refuses a truncated or foreign file
        tokens = np.frombuffer(path.read_bytes()[HEADER_BYTES:], dtype="<u2").astype(np.int64)
        cuts = np.flatnonzero(tokens == newline)
        prompts += [seg.tolist() for seg in np.split(tokens, cuts + 1) if seg.size > 1]
    if not prompts:
        raise DriftReferenceError(f"{data_dir}: no training shards to build a drift reference from")
    return prompts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.inference.drift",
        description="Write the drift reference of a training corpus into an export.",
    )
    parser.add_argument("--corpus", type=Path, required=True, help="UTF-8 training text")
    parser.add_argument("--out", type=Path, required=True, help="export directory")
    args = parser.parse_args(argv)
    try:
        if not args.out.is_dir():
            raise DriftReferenceError(f"{args.out}: no such export directory")
        reference = build_reference(corpus_prompts(args.corpus), 256, f"corpus {args.corpus}")
        tmp = args.out / (REFERENCE_FILE + ".tmp")
        tmp.write_text(reference.to_json(), encoding="utf-8")
        tmp.replace(args.out / REFERENCE_FILE)
    except (DriftReferenceError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.out / REFERENCE_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
