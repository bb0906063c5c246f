"""Drift scores: in-distribution prompts stay below the alert threshold, shifted ones
cross it; the window forgets; the reference file round-trips and bad ones are refused."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from modules.k8s.serving.spec import ServingSpec
from workloads.inference.drift import (
    DriftReference,
    DriftReferenceError,
    DriftWindow,
    build_reference,
    corpus_prompts,
    psi,
)

CORPUS = Path(__file__).resolve().parents[2] / "workloads" / "data" / "corpus.txt"
# The thresholds the cluster's ModelInputDrift alert uses by default.
TOKEN_JS_THRESHOLD = ServingSpec().drift_token_js_threshold
LENGTH_PSI_THRESHOLD = ServingSpec().drift_prompt_length_psi_threshold


@pytest.fixture(scope="module")
def split() -> tuple[DriftReference, list[list[int]]]:
    prompts = corpus_prompts(CORPUS)
    random.Random(0).shuffle(prompts)
    held_out = prompts[: len(prompts) // 5]
    return build_reference(prompts[len(prompts) // 5 :], 256, "test"), held_out


def test_in_distribution_traffic_stays_below_the_thresholds(
    split: tuple[DriftReference, list[list[int]]],
) -> None:
    reference, held_out = split
    window = DriftWindow(reference, window=200)
    for prompt in held_out[:200]:
        window.add(prompt)
    scores = window.scores()
    assert scores["token_js"] < TOKEN_JS_THRESHOLD / 2, scores
    assert scores["prompt_length_psi"] < LENGTH_PSI_THRESHOLD / 2, scores


def test_shifted_traffic_crosses_the_thresholds(
    split: tuple[DriftReference, list[list[int]]],
) -> None:
    reference, _ = split
    window = DriftWindow(reference, window=200)
    rng = random.Random(1)
    for _ in range(200):  # Arabic text: bytes the English corpus never has, short prompts
        window.add(list("مرحبا بالعالم".encode())[: rng.randint(3, 7)])
    scores = window.scores()
    assert scores["token_js"] > TOKEN_JS_THRESHOLD, scores
    assert scores["prompt_length_psi"] > LENGTH_PSI_THRESHOLD, scores


def test_the_window_forgets_old_prompts(split: tuple[DriftReference, list[list[int]]]) -> None:
    reference, held_out = split
    window = DriftWindow(reference, window=50)
    for _ in range(50):
        window.add([0xD9, 0x85])
    assert window.scores()["token_js"] > TOKEN_JS_THRESHOLD
    for prompt in held_out[:50]:
        window.add(prompt)
    assert len(window) == 50
    assert window.scores()["token_js"] < TOKEN_JS_THRESHOLD


def test_psi_is_zero_for_equal_distributions_and_grows_with_shift() -> None:
    assert psi([10, 20, 30], [10, 20, 30]) == pytest.approx(0.0)
    assert psi([10, 20, 30], [30, 20, 10]) > psi([10, 20, 30], [12, 20, 28]) > 0


def test_reference_round_trip_and_bad_files(tmp_path: Path) -> None:
    reference = build_reference([[1, 2, 3], [4]], 8, "unit")
    path = tmp_path / "ref.json"
    path.write_text(reference.to_json())
    assert DriftReference.read(path) == reference
    path.write_text("{}")
    with pytest.raises(DriftReferenceError, match="not a drift reference"):
        DriftReference.read(path)
    with pytest.raises(DriftReferenceError, match="no non-empty prompts"):
        build_reference([[]], 8, "unit")
