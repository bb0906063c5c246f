"""``make register RUN=<run id>``: a tracked run's final checkpoint as a registered
model version that is an MLflow model, with its Triton repository.

1. The run's ``checkpoint`` tag (set by training at its last save) names the final
   checkpoint. If a version of the model already comes from this run and checkpoint
   step, that version is the answer (nothing is logged twice).
2. The checkpoint is exported (``make export``'s pipeline, parity checked) into
   ``build/export/run-<id>/``, unless an export of that very checkpoint is already
   there or is given with ``--export-dir``.
3. The fp32 and int8 ONNX models are logged to the run as MLflow models through
   MLflow's ONNX flavor (``mlflow.onnx.log_model``), each with a signature and an input
   example read from the graph (token ids, int64 ``[batch, sequence]`` -> logits) and,
   beside ``model.onnx``, the model card (``files`` naming that one model), the parity
   figures, the drift reference and the dataset the run trained on (``dataset.json``).
   Each model's directory is therefore also an export `OnnxLM.load` and the CPU
   predictor read (the int8 one is what CPU pools serve).
4. The fp32 model's artifacts also get the Triton repository (``triton/``, both models,
   named ``<name>`` and ``<name>-int8``): the directory Triton serves on GPU pools.
5. A version of the registered model is created with the fp32 MLflow model as its
   source (``models:/<name>/<version>`` loads with ``mlflow.onnx`` and ``mlflow.pyfunc``),
   tagged with the run, checkpoint step, export digest, dataset digest, the int8 model's
   URI, the parity figures and the two storage paths serving needs.
6. Aliases: the first version becomes ``champion``; a later one ``challenger`` (what a
   canary runs; `make promote` makes it the champion).
7. Beside it, the same checkpoint as a Hugging Face model (`workloads.inference.hf_export`,
   parity checked; ``build/export-hf/run-<id>/``) is logged through MLflow's transformers
   flavor as a ``text-generation`` pipeline and registered as ``<name>-hf`` (loads with
   ``mlflow.transformers.load_model``; what vLLM serves), tagged like the ONNX version,
   with its own aliases; the ONNX version is tagged with its URI. ``--no-transformers``
   leaves it out.

Exit status: 0 registered (or already registered), 2 unknown run, no checkpoint, a
tracking URI that is not a server's URL, unreachable server or a failed export, 130
interrupted (Ctrl-C; running it again finishes the job, or finds the version made).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.inference.card import (
    CARD_FILE,
    FP32_FILE,
    INPUT_NAME,
    INT8_FILE,
    ModelCard,
    read_card,
)
from workloads.inference.drift import REFERENCE_FILE
from workloads.inference.errors import ExportError
from workloads.inference.export import DEFAULT_EXPORT_ROOT, checkpoint_root, export_checkpoint
from workloads.inference.hf_export import DEFAULT_EXPORT_ROOT as HF_EXPORT_ROOT
from workloads.inference.hf_export import RECORD_FILE as HF_RECORD_FILE
from workloads.inference.hf_export import HfExport, export_hf, quiet_transformers, read_record
from workloads.inference.source import resolve_checkpoint
from workloads.inference.tokenizer import BYTE_TOKENIZER, ByteTokenizer
from workloads.inference.triton import check_model_name, write_repository
from workloads.layout import (
    TRITON_DIR,
    model_storage_path,
    triton_storage_path,
)
from workloads.tracking.promote import canary_commands
from workloads.tracking.registry import (
    CHALLENGER,
    CHAMPION,
    RegistryError,
    call,
    make_client,
)
from workloads.training.config import TrainConfig
from workloads.training.lineage import file_digest, read_run_record

EXIT_OK = 0
EXIT_USER_ERROR = 2
#: Interrupted (Ctrl-C): 128 + SIGINT, as a shell reports a command SIGINT stopped.
EXIT_INTERRUPTED = 130
#: The ONNX flavor's file in an MLflow model directory (``mlflow.onnx``'s data path).
MLFLOW_ONNX_FILE = "model.onnx"
PARITY_FILE = "parity.json"
DATASET_FILE = "dataset.json"
#: The run's artifact where training logs every shard's digest (`MlflowTracker`).
LINEAGE_ARTIFACT = "lineage.json"
#: Version tags that identify what a version was made from (the idempotency key is
#: the run id, which MLflow keeps on the version, plus the checkpoint step).
STEP_TAG = "checkpoint_step"
DIGEST_TAG = "export_digest"
TRITON_PATH_TAG = "storage_path.triton"
CPU_PATH_TAG = "storage_path.cpu"
#: The canary share the printed rollout uses (25% splits evenly over 4 replicas).
CANARY_PERCENT = 25
#: A logged model's artifact location: ``<experiment root>/models/<model id>/artifacts``.
_MODEL_LOCATION = re.compile(r"/(?P<experiment>[^/]+)/models/(?P<model>[^/]+)/artifacts/?$")

#: The transformers-flavor model of a registration: ``<name>-hf``, a text-generation
#: pipeline (step 7 of the module docstring).
HF_SUFFIX = "-hf"
HF_TASK = "text-generation"
#: The ONNX version's tag naming the transformers model version of the same checkpoint.
HF_MODEL_TAG = "transformers_model_uri"
#: New tokens a pyfunc ``predict`` generates unless its ``max_new_tokens`` param says
#: otherwise (the pipeline's own default, 256, runs past the tiny model's context).
HF_MAX_NEW_TOKENS = 32
#: The model card's metadata block (the Hub's card format; without one huggingface_hub
#: warns on every load).
_CARD_METADATA = "---\nlibrary_name: transformers\npipeline_tag: text-generation\n---\n"
#: A registered model's description when the registration makes it.
TRAINED_DESCRIPTION = "GPT-style model trained on the platform"

#: Kept for callers of the earlier name.
RegisterError = RegistryError


@dataclass(frozen=True)
class Registration:
    """What `register` did.

    Args:
        name: the registered model.
        version: its version for this run's checkpoint.
        created: false when that version existed already (nothing was logged).
        alias: the alias this call set (``champion``, ``challenger``), or empty.
        tags: the version's tags.
        transformers_version: the ``<name>-hf`` version of the same checkpoint (empty
            when left out with ``--no-transformers``).
    """

    name: str
    version: str
    created: bool
    alias: str
    tags: dict[str, str]
    transformers_version: str = ""


def _get_run(client: Any, run_id: str, uri: str) -> Any:
    return call(
        uri,
        lambda: client.get_run(run_id),
        missing=(
            f"no run {run_id!r} on {uri}; copy the id from the run's page or from the "
            "`View run` line training printed"
        ),
    )


def export_digest(export_dir: Path, card: ModelCard) -> str:
    """One SHA-256 over the export's ONNX files (what a version serves)."""
    joined = "\n".join(
        f"{variant} {file_digest(export_dir / card.files[variant])}"
        for variant in sorted(card.files)
    )
    return hashlib.sha256(joined.encode()).hexdigest()


def _export_for(run_id: str, step_dir: Path, export_dir: Path | None) -> tuple[Path, ModelCard]:
    """The export to register: ``--export-dir``, the earlier export of this checkpoint
    in ``build/export/run-<id>``, or a fresh export there."""
    if export_dir is not None:
        card = read_card(export_dir)
        if Path(card.source.get("checkpoint", "")).resolve() != step_dir.resolve():
            raise RegistryError(
                f"{export_dir} was exported from {card.source.get('checkpoint')}, not the run's "
                f"final checkpoint {step_dir}; leave --export-dir out to export it"
            )
        return export_dir, card
    out = DEFAULT_EXPORT_ROOT / f"run-{run_id}"
    try:
        card = read_card(out)
        if Path(card.source.get("checkpoint", "")).resolve() == step_dir.resolve() and all(
            (out / f).is_file() for f in card.files.values()
        ):
            print(f"register: using the export of this checkpoint in {out}/", flush=True)
            return out, card
    except ExportError:
        pass  # none there (or unreadable): export
    record = read_run_record(checkpoint_root(step_dir))
    if record is None:
        raise RegistryError(f"{step_dir.parent} has no run.json; cannot rebuild the model")
    config: TrainConfig = record.config
    print(f"register: exporting {step_dir} to {out}/ (parity checked)", flush=True)
    card = export_checkpoint(step_dir, out, config, run_id=run_id, revision=record.git_revision)
    return out, card


def _existing_version(client: Any, uri: str, name: str, run_id: str, step: str) -> Any | None:
    versions = call(
        uri, lambda: client.search_model_versions(f"name='{name}' and run_id='{run_id}'")
    )
    same = [v for v in versions if v.tags.get(STEP_TAG) == step]
    return min(same, key=lambda v: int(v.version)) if same else None


def _dataset(client: Any, uri: str, run: Any, scratch: Path) -> dict[str, Any]:
    """The run's dataset record: the combined digest and shard count (run parameters)
    and each shard's digest (the run's ``lineage.json``), as training logged them."""
    params = run.data.params
    dataset: dict[str, Any] = {
        "run_id": run.info.run_id,
        "data.shards_sha256": params.get("data.shards_sha256", ""),
        "data.shards": params.get("data.shards", ""),
        "data_dir": params.get("data_dir", ""),
    }
    names = {a.path for a in call(uri, lambda: client.list_artifacts(run.info.run_id))}
    if LINEAGE_ARTIFACT in names:
        local = call(
            uri,
            lambda: client.download_artifacts(run.info.run_id, LINEAGE_ARTIFACT, str(scratch)),
        )
        dataset |= json.loads(Path(local).read_text(encoding="utf-8"))
    return dataset


def _signature(path: Path) -> Any:
    """The ONNX graph's inputs and outputs as an MLflow tensor signature (-1: dynamic)."""
    import numpy as np  # noqa: PLC0415
    import onnx  # noqa: PLC0415
    from mlflow.models.signature import ModelSignature  # noqa: PLC0415
    from mlflow.types.schema import Schema, TensorSpec  # noqa: PLC0415

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}

    def spec(value: Any) -> Any:
        kind = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in kind.shape.dim)
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(kind.elem_type))
        return TensorSpec(dtype, shape, value.name)

    inputs = [spec(v) for v in graph.input if v.name not in initializers]
    return ModelSignature(Schema(inputs), Schema([spec(v) for v in graph.output]))


def _input_example(card: ModelCard) -> dict[str, Any]:
    """One prompt as the graph takes it: token ids, int64 ``[1, sequence]``."""
    import numpy as np  # noqa: PLC0415

    ids = ByteTokenizer().encode("The ") if card.tokenizer == BYTE_TOKENIZER else [0, 1, 2, 3]
    return {INPUT_NAME: np.array([ids], dtype=np.int64)}


def _model_extras(
    target: Path, card: ModelCard, export_dir: Path, *, variant: str, name: str, dataset: Any
) -> None:
    """The files beside an MLflow model's ``model.onnx``: its own card (naming that one
    file), parity figures, drift reference, dataset record."""
    target.mkdir(parents=True)
    own = dataclasses.replace(card, name=name, files={variant: MLFLOW_ONNX_FILE})
    (target / CARD_FILE).write_text(own.to_json(), encoding="utf-8")
    parity = json.dumps(dataclasses.asdict(card.parity), indent=2)
    (target / PARITY_FILE).write_text(parity + "\n", encoding="utf-8")
    if (export_dir / REFERENCE_FILE).is_file():
        shutil.copyfile(export_dir / REFERENCE_FILE, target / REFERENCE_FILE)
    (target / DATASET_FILE).write_text(json.dumps(dataset, indent=2) + "\n", encoding="utf-8")


def _pip_requirements() -> list[str]:
    """What loading an ONNX model as MLflow's pyfunc imports, pinned to this environment:
    the ONNX flavor's own requirements (onnx, onnxruntime) and numpy; MLflow adds itself.
    Given, MLflow does not infer them: its inference starts a Python process per model
    that loads the model to see what it imports, and finds these same packages."""
    from importlib.metadata import version  # noqa: PLC0415

    import mlflow.onnx  # noqa: PLC0415

    return [f"numpy=={version('numpy')}", *mlflow.onnx.get_default_pip_requirements()]


def _log_onnx_model(
    client: Any,
    uri: str,
    path: Path,
    *,
    run_id: str,
    served_name: str,
    metadata: dict[str, str],
    card: ModelCard,
    extras: Path,
) -> Any:
    import mlflow.onnx  # noqa: PLC0415
    import onnx  # noqa: PLC0415

    # MLflow's internal helper that sets the fluent API's tracking URI for the call
    # and puts the caller's back: log_model reads it, and nothing here should leave a
    # process (a test, a notebook) pointed at another server.
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri  # noqa: PLC0415

    # Created in the run's experiment, so its files land under
    # <experiment>/models/<model id>/artifacts (what the storage paths name).
    experiment_id = call(uri, lambda: client.get_run(run_id)).info.experiment_id
    model = call(
        uri,
        lambda: client.create_logged_model(
            experiment_id, name=served_name, source_run_id=run_id, model_type="onnx"
        ),
    )
    with _use_tracking_uri(uri):
        info = call(
            uri,
            lambda: mlflow.onnx.log_model(
                onnx.load(str(path)),
                name=served_name,
                model_id=model.model_id,
                run_id=run_id,
                signature=_signature(path),
                input_example=_input_example(card),
                metadata=metadata,
                # One file, as the export wrote it: Triton and the CPU predictor read it so.
                save_as_external_data=False,
                pip_requirements=_pip_requirements(),
            ),
        )
    call(uri, lambda: client.log_model_artifacts(info.model_id, str(extras)))
    return info


def _storage_path(client: Any, uri: str, model_id: str, triton: bool) -> str:
    """Where the cluster's serving reads a logged model (see `workloads.layout`);
    empty when its artifact location is not MLflow's ``<experiment>/models/<id>``."""
    location = call(uri, lambda: client.get_logged_model(model_id)).artifact_location
    found = _MODEL_LOCATION.search(str(location))
    if found is None:
        return ""
    experiment, model = found["experiment"], found["model"]
    return (
        triton_storage_path(experiment, model) if triton else model_storage_path(experiment, model)
    )


def _set_alias(client: Any, uri: str, name: str, version: str) -> str:
    aliases = call(uri, lambda: client.get_registered_model(name)).aliases
    champion = aliases.get(CHAMPION)
    alias = CHALLENGER if champion is not None and str(champion) != version else CHAMPION
    call(uri, lambda: client.set_registered_model_alias(name, alias, version))
    return alias


def register(
    run_id: str,
    uri: str,
    *,
    model_name: str = "",
    export_dir: Path | None = None,
    transformers: bool = True,
) -> Registration:
    """Register ``run_id``'s final checkpoint (see the module docstring).

    Args:
        run_id: the tracked training run.
        uri: the tracking server (or SQLite store).
        model_name: the registered model (default: the run's preset).
        export_dir: an ONNX export of the run's final checkpoint to register.
        transformers: also register the Hugging Face export as ``<name>-hf``.

    Raises:
        RegistryError: unknown run, no checkpoint, unusable name, unreachable server.
        ExportError: the checkpoint cannot be exported.
    """
    client = make_client(uri)
    run = _get_run(client, run_id, uri)
    tag = run.data.tags.get("checkpoint")
    if not tag:
        raise RegistryError(
            f"run {run_id} logged no checkpoint (train with --ckpt-dir to register its model)"
        )
    step, step_dir = resolve_checkpoint(Path(tag))
    name = model_name or str(run.data.tags.get("preset") or "model")
    try:
        check_model_name(name)
        check_model_name(f"{name}-int8")
    except ExportError as err:
        raise RegistryError(f"{err}; choose another with --name") from err
    result = _register_onnx(
        client, uri, run, name=name, step=step, step_dir=step_dir, export_dir=export_dir
    )
    if not transformers:
        return result
    hf_version = _register_transformers(
        client, uri, run_id, name=name, step=step, step_dir=step_dir, onnx_version=result.version
    )
    return dataclasses.replace(result, transformers_version=hf_version)


def _register_onnx(
    client: Any,
    uri: str,
    run: Any,
    *,
    name: str,
    step: int,
    step_dir: Path,
    export_dir: Path | None,
) -> Registration:
    """Steps 1-6: the ONNX version of the run's checkpoint (the one made earlier, or a
    new one)."""
    run_id = str(run.info.run_id)
    existing = _existing_version(client, uri, name, run_id, str(step))
    if existing is not None:
        return Registration(name, str(existing.version), False, "", dict(existing.tags))

    out, card = _export_for(run_id, step_dir, export_dir)
    digest = export_digest(out, card)
    scratch = Path(tempfile.mkdtemp(prefix="register-"))
    logged: list[str] = []
    version: Any = None
    try:
        dataset = _dataset(client, uri, run, scratch / "lineage")
        metadata = {
            "run_id": run_id,
            STEP_TAG: str(step),
            DIGEST_TAG: digest,
            "data.shards_sha256": str(dataset["data.shards_sha256"]),
        }
        infos = {}
        for variant, file, served in (
            ("fp32", FP32_FILE, name),
            ("int8", INT8_FILE, f"{name}-int8"),
        ):
            extras = scratch / variant
            _model_extras(extras, card, out, variant=variant, name=name, dataset=dataset)
            infos[variant] = _log_onnx_model(
                client,
                uri,
                out / file,
                run_id=run_id,
                served_name=served,
                metadata=metadata | {"variant": variant},
                card=card,
                extras=extras,
            )
            logged.append(infos[variant].model_id)
        # The Triton repository, under the registered (fp32) model's artifacts.
        write_repository(
            scratch / TRITON_DIR,
            {name: out / FP32_FILE, f"{name}-int8": out / INT8_FILE},
            context_length=card.context_length,
            logit_rows=card.logit_rows,
        )
        fp32_id = infos["fp32"].model_id
        call(
            uri,
            lambda: client.log_model_artifacts(fp32_id, str(scratch / TRITON_DIR), TRITON_DIR),
        )
        # The checkpoint itself stays with the run (the weights of record), per step.
        where = f"checkpoint/{step_dir.name}"
        call(uri, lambda: client.log_artifacts(run_id, str(step_dir), artifact_path=where))
        parity = card.parity
        tags = {
            "run_id": run_id,
            "checkpoint": str(step_dir),
            STEP_TAG: str(step),
            DIGEST_TAG: digest,
            "data.shards_sha256": str(dataset["data.shards_sha256"]),
            "data.shards": str(dataset["data.shards"]),
            "model_card": CARD_FILE,
            "int8_model_uri": infos["int8"].model_uri,
            TRITON_PATH_TAG: _storage_path(client, uri, fp32_id, triton=True),
            CPU_PATH_TAG: _storage_path(client, uri, infos["int8"].model_id, triton=False),
            "triton_models": f"{name},{name}-int8",
            "parity.fp32_max_abs_logit_diff": f"{parity.fp32_max_abs_logit_diff:.3g}",
            "parity.fp32_loss": f"{parity.fp32_loss:.4f}",
            "parity.int8_loss": f"{parity.int8_loss:.4f}",
        }
        call(uri, lambda: _ensure_registered_model(client, name))
        version = _create_version(
            client,
            uri,
            name,
            source=infos["fp32"].model_uri,
            run_id=run_id,
            model_id=fp32_id,
            tags=tags,
            description=(
                f"checkpoint {step_dir.name} of run {run_id}: fp32 ONNX model "
                f"(int8: {infos['int8'].model_uri}, Triton repository: {TRITON_DIR}/)"
            ),
        )
        alias = _set_alias(client, uri, name, str(version.version))
    except BaseException:
        # Models of a registration that made no version are not left READY for anyone
        # to mistake for one; once the version exists, they are its source.
        for model_id in logged if version is None else []:
            with contextlib.suppress(Exception):  # the first error is the one to report
                client.finalize_logged_model(model_id, "FAILED")
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Registration(name, str(version.version), True, alias, tags)


def _hf_export_for(run_id: str, step_dir: Path) -> tuple[Path, HfExport]:
    """The Hugging Face export of ``step_dir``: the earlier one in
    ``build/export-hf/run-<id>`` when it is of this checkpoint, else a fresh one there."""
    out = HF_EXPORT_ROOT / f"run-{run_id}"
    try:
        record = read_record(out)
        if Path(record.source.get("checkpoint", "")).resolve() == step_dir.resolve():
            print(f"register: using the Hugging Face export of this checkpoint in {out}/")
            return out, record
    except ExportError:
        pass  # none there (or unreadable): export
    run = read_run_record(checkpoint_root(step_dir))
    if run is None:
        raise RegistryError(f"{step_dir.parent} has no run.json; cannot rebuild the model")
    print(f"register: exporting {step_dir} to {out}/ (Hugging Face, parity checked)", flush=True)
    record = export_hf(step_dir, out, run.config, run_id=run_id, revision=run.git_revision)
    return out, record


def _hf_pip_requirements() -> list[str]:
    """What loading the pipeline imports, pinned to this environment (given, so MLflow
    does not start a process that loads the model to find out)."""
    from importlib.metadata import version  # noqa: PLC0415

    # torch's local version label (+cpu) names a wheel index, not a release.
    pins = [f"torch=={version('torch').split('+')[0]}"]
    return pins + [f"{p}=={version(p)}" for p in ("transformers", "tokenizers", "safetensors")]


def log_transformers_model(
    client: Any,
    uri: str,
    folder: Path,
    *,
    run_id: str,
    name: str,
    card: str,
    metadata: dict[str, str],
    extras: Sequence[Path] = (),
) -> Any:
    """Log the Hugging Face model folder ``folder`` to run ``run_id`` through MLflow's
    transformers flavor, as a ``text-generation`` pipeline named ``name``; its model
    info. The logged model is marked FAILED when logging fails.

    Args:
        client: the registry's `MlflowClient`.
        uri: the tracking server (for the messages and the fluent API).
        folder: a folder ``AutoModelForCausalLM`` and ``AutoTokenizer`` load.
        run_id: the run the model is logged to (its experiment holds the model's files).
        name: the logged model's name.
        card: the model card's Markdown (``README.md`` beside the model).
        metadata: the MLflow model's metadata.
        extras: files copied beside the model (records of how it was made).
    """
    quiet_transformers()  # no progress bars between the command's lines
    import mlflow.transformers  # noqa: PLC0415
    from huggingface_hub import ModelCard  # noqa: PLC0415
    from mlflow.models import infer_signature  # noqa: PLC0415
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri  # noqa: PLC0415
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline  # noqa: PLC0415

    # MLflow 3.17's log_model(<folder path>) fails on transformers 5 (it reads the task's
    # pipeline class from a registry entry that is now a string), so the folder is loaded
    # into the pipeline it logs; save_pretrained writes the same weights and tokenizer.
    # Any: transformers' overloads take a literal task and a PreTrainedModel, and
    # from_pretrained's declared return type is neither.
    make_pipeline: Any = pipeline
    generator = make_pipeline(
        HF_TASK,
        model=AutoModelForCausalLM.from_pretrained(str(folder)),
        tokenizer=AutoTokenizer.from_pretrained(str(folder)),
    )
    prompt = "The "
    signature = infer_signature(
        [prompt], [prompt], params={"max_new_tokens": HF_MAX_NEW_TOKENS, "do_sample": False}
    )
    experiment_id = call(uri, lambda: client.get_run(run_id)).info.experiment_id
    model = call(
        uri,
        lambda: client.create_logged_model(
            experiment_id, name=name, source_run_id=run_id, model_type="transformers"
        ),
    )
    try:
        with _use_tracking_uri(uri):
            info = call(
                uri,
                lambda: mlflow.transformers.log_model(
                    generator,
                    name=name,
                    model_id=model.model_id,
                    run_id=run_id,
                    task=HF_TASK,
                    model_card=ModelCard(_CARD_METADATA + card),
                    signature=signature,
                    model_config={"max_new_tokens": HF_MAX_NEW_TOKENS},
                    metadata=metadata | {"format": "transformers"},
                    pip_requirements=_hf_pip_requirements(),
                ),
            )
        if extras:
            scratch = Path(tempfile.mkdtemp(prefix="register-hf-"))
            try:
                for path in extras:
                    shutil.copyfile(path, scratch / path.name)
                call(uri, lambda: client.log_model_artifacts(info.model_id, str(scratch)))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    except BaseException:
        with contextlib.suppress(Exception):  # the first error is the one to report
            client.finalize_logged_model(model.model_id, "FAILED")
        raise
    return info


def register_logged_model(
    client: Any,
    uri: str,
    name: str,
    info: Any,
    *,
    run_id: str,
    tags: dict[str, str],
    description: str,
    model_description: str,
) -> tuple[str, str]:
    """A new version of registered model ``name`` (made if missing) from the logged
    model ``info``, with ``tags``, and the alias it gets (`_set_alias`): ``(version,
    alias)``. The logged model is marked FAILED when no version could be made."""
    version: Any = None
    try:
        call(uri, lambda: _ensure_registered_model(client, name, model_description))
        version = _create_version(
            client,
            uri,
            name,
            source=info.model_uri,
            run_id=run_id,
            model_id=info.model_id,
            tags=tags,
            description=description,
        )
        alias = _set_alias(client, uri, name, str(version.version))
    except BaseException:
        if version is None:
            with contextlib.suppress(Exception):
                client.finalize_logged_model(info.model_id, "FAILED")
        raise
    return str(version.version), alias


def _register_transformers(
    client: Any, uri: str, run_id: str, *, name: str, step: int, step_dir: Path, onnx_version: str
) -> str:
    """Step 7: the checkpoint's Hugging Face export as version of ``<name>-hf``; that
    version (an earlier one of this run and step when there is one)."""
    hf_name = f"{name}{HF_SUFFIX}"
    existing = _existing_version(client, uri, hf_name, run_id, str(step))
    if existing is not None:
        return str(existing.version)
    quiet_transformers()  # no progress bars between register's lines
    folder, record = _hf_export_for(run_id, step_dir)
    card = (
        f"# {hf_name}\n\nA GPT-2 architecture model trained on the platform (run {run_id}, "
        f"checkpoint {step_dir.name}), exported by `make export-hf`: byte-level UTF-8 "
        "tokenizer (one token per byte), no end-of-text token.\n"
    )
    info = log_transformers_model(
        client,
        uri,
        folder,
        run_id=run_id,
        name=hf_name,
        card=card,
        metadata={"run_id": run_id, STEP_TAG: str(step)},
        extras=[folder / HF_RECORD_FILE],
    )
    tags = {
        "run_id": run_id,
        "checkpoint": str(step_dir),
        STEP_TAG: str(step),
        "format": "transformers",
        "task": HF_TASK,
        "onnx_model_version": f"models:/{name}/{onnx_version}",
        "parity.max_abs_logit_diff": f"{record.max_abs_logit_diff:.3g}",
    }
    version, _ = register_logged_model(
        client,
        uri,
        hf_name,
        info,
        run_id=run_id,
        tags=tags,
        description=(
            f"checkpoint {step_dir.name} of run {run_id}: Hugging Face GPT2LMHeadModel "
            f"with the byte tokenizer (ONNX: models:/{name}/{onnx_version})"
        ),
        model_description=TRAINED_DESCRIPTION,
    )
    uri_of = f"models:/{hf_name}/{version}"
    call(uri, lambda: client.set_model_version_tag(name, onnx_version, HF_MODEL_TAG, uri_of))
    return version


def _create_version(client: Any, uri: str, name: str, **version: Any) -> Any:
    """``client.create_model_version(name, **version)`` with ``uri`` as the global
    tracking URI meanwhile: MLflow's SQL registry store reads a ``models:/<model id>``
    source through a client of the global URI, not its own (an ``sqlite:///`` store
    then looks in another database and finds no such model)."""
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri  # noqa: PLC0415

    with _use_tracking_uri(uri):
        return call(uri, lambda: client.create_model_version(name, **version))


def _ensure_registered_model(
    client: Any, name: str, description: str = TRAINED_DESCRIPTION
) -> None:
    from mlflow.exceptions import MlflowException  # noqa: PLC0415

    try:
        client.create_registered_model(name, description=description)
    except MlflowException as err:
        if err.error_code != "RESOURCE_ALREADY_EXISTS":
            raise


def _report(result: Registration, run_id: str, uri: str) -> None:
    tags = result.tags
    if not result.created:
        print(
            f"register: run {run_id} (checkpoint step {tags.get(STEP_TAG, '?')}) is already "
            f"model {result.name!r} version {result.version} on {uri} (export digest "
            f"{tags.get(DIGEST_TAG, '?')[:12]}); nothing new was registered"
        )
    else:
        print(f"register: run {run_id} -> model {result.name!r} version {result.version} on {uri}")
        print(f"register: alias {result.alias!r} now names version {result.version}")
    print(
        f"register: load it with mlflow.onnx.load_model('models:/{result.name}/{result.version}')"
    )
    if result.transformers_version:
        hf_uri = f"models:/{result.name}{HF_SUFFIX}/{result.transformers_version}"
        print(
            f"register: the Hugging Face model is {hf_uri}: load it with "
            f"mlflow.transformers.load_model('{hf_uri}')"
        )
    if tags.get(TRITON_PATH_TAG):
        print(f"register: storagePath on GPU pools (Triton): {tags[TRITON_PATH_TAG]}")
    if tags.get(CPU_PATH_TAG):
        print(f"register: storagePath on CPU pools (int8):   {tags[CPU_PATH_TAG]}")
    if result.alias == CHALLENGER:
        path = tags.get(TRITON_PATH_TAG) or "<its storage path>"
        print(
            f"register: to try it as a canary on {CANARY_PERCENT}% of the requests (GPU pools; "
            "CPU pools take the int8 storagePath), run from the repository root:"
        )
        for line in canary_commands(result.version, path, CANARY_PERCENT, stack="<stack>"):
            print(f"  {line}")
        print(
            f"register: then `make promote NAME={result.name}` (ARGS=--dry-run shows what it "
            "does first) or drop the canary keys (docs/serving.md)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.tracking.register",
        description="Register a tracked run's final checkpoint as MLflow ONNX models.",
    )
    parser.add_argument("run_id", help="the MLflow run id")
    parser.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000"),
        help="tracking server (default: MLFLOW_TRACKING_URI, else http://127.0.0.1:5000)",
    )
    parser.add_argument("--name", default="", help="registered model name (default: preset)")
    parser.add_argument("--export-dir", type=Path, help="an export of the run's checkpoint")
    parser.add_argument(
        "--no-transformers",
        action="store_true",
        help=f"do not register the Hugging Face export as <name>{HF_SUFFIX}",
    )
    args = parser.parse_args(argv)
    run_id = args.run_id.strip()
    if not run_id:
        print("register: RUN= is empty; give the run id (make register RUN=<id>)", file=sys.stderr)
        return EXIT_USER_ERROR
    try:
        result = register(
            run_id,
            args.tracking_uri,
            model_name=args.name,
            export_dir=args.export_dir,
            transformers=not args.no_transformers,
        )
    except (RegistryError, ExportError) as err:
        print(f"register: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as err:  # a local file that cannot be read or written
        print(f"register: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:  # models logged without a version were marked FAILED
        print(
            "register: interrupted; run it again to register the run (a version already "
            "made for it is found, not made twice)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    _report(result, run_id, args.tracking_uri)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
