"""`make serve-llm MODEL=models:/<name>@<alias>`: the registry's transformers-flavor
version, logged with `mlflow.transformers` (in the lifecycle environment, as the export's
registration does), becomes a local folder that passes every serve-llm check, with the
weights and tokenizer it was logged with; a second start reuses it; a folder serve-llm
did not make is never overwritten; an ONNX-only version is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tests.support.environments import python, run_in
from workloads.llm import serve

ROOT = Path(__file__).resolve().parents[2]
NAME = "tiny-llm"

LOG = """
import sys, mlflow, transformers
model_dir, store, artifacts, name = sys.argv[1:]
mlflow.set_tracking_uri(store)
mlflow.set_experiment(mlflow.create_experiment("llm", artifact_location=artifacts))
model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
with mlflow.start_run():
    info = mlflow.transformers.log_model(
        {"model": model, "tokenizer": tokenizer}, name="model", task="text-generation",
        registered_model_name=name,
        # Given, not inferred: MLflow's inference imports torchvision, which the
        # environment does not have.
        pip_requirements=[f"transformers=={transformers.__version__}"],
    )
client = mlflow.MlflowClient(store)
client.set_registered_model_alias(name, "champion", info.registered_model_version)
# A second model whose only version is not a transformers one (a pyfunc stand-in for the
# ONNX model make register writes).
class Echo(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input):
        return model_input
with mlflow.start_run():
    other = mlflow.pyfunc.log_model(
        name="onnx", python_model=Echo(), registered_model_name="onnx-only"
    )
client.set_registered_model_alias("onnx-only", "champion", other.registered_model_version)
"""


@pytest.fixture(scope="module")
def registry(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("registry")
    store = f"sqlite:///{tmp / 'mlflow.db'}"
    run_in("lifecycle", "-c", LOG, str(tiny_model), store, str(tmp / "artifacts"), NAME)
    return store


def test_a_registered_version_becomes_a_servable_folder(
    registry: str, tiny_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "llm-models"
    folder = serve.from_registry(f"models:/{NAME}@champion", registry, python("lifecycle"), out)
    assert folder == out / NAME / "1"
    checked = serve.model_folder(str(folder))
    assert (checked.head_size, checked.context) == (32, 128)
    assert (folder / "model.safetensors").is_file()
    logged = json.loads((folder / "config.json").read_text())
    original = json.loads((tiny_model / "config.json").read_text())
    assert {k: logged[k] for k in ("n_embd", "n_head", "n_layer")} == {
        k: original[k] for k in ("n_embd", "n_head", "n_layer")
    }
    text = "مرحبا, byte by byte"
    assert AutoTokenizer.from_pretrained(folder)(text)["input_ids"] == list(text.encode())
    # Laid out once: a second start finds it and downloads nothing.
    stamp = (folder / "config.json").stat().st_mtime_ns
    again = serve.from_registry(f"models:/{NAME}/1", registry, python("lifecycle"), out)
    assert again == folder
    assert (folder / "config.json").stat().st_mtime_ns == stamp


def test_a_folder_it_did_not_make_is_left_alone(registry: str, tmp_path: Path) -> None:
    out = tmp_path / "llm-models"
    theirs = out / NAME / "1"
    theirs.mkdir(parents=True)
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(serve.UsageError, match="was not made by serve-llm"):
        serve.from_registry(f"models:/{NAME}@champion", registry, python("lifecycle"), out)
    assert [p.name for p in theirs.iterdir()] == ["notes.txt"]


def test_a_version_that_is_not_a_transformers_model(registry: str, tmp_path: Path) -> None:
    with pytest.raises(serve.UsageError, match="not a transformers one"):
        serve.from_registry("models:/onnx-only@champion", registry, python("lifecycle"), tmp_path)
    assert not (tmp_path / "onnx-only" / "1").exists()
