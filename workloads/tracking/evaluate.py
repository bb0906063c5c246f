"""The pipeline's gate: a newly trained model goes on to export and registration only
if its held-out loss is no worse than the registered ``champion``'s.

``python -m workloads.tracking.evaluate CHECKPOINT --data-dir DATASET --tracking-uri URI``

1. The run: the checkpoint directory's ``run.json`` (written by training) gives the
   model's config and its MLflow run id; a run that was not tracked is refused (there
   would be nothing to register).
2. The champion: the registered model's ``champion`` alias (the model is ``--name``, or
   the run's preset, as `make register` names it). None (the model's first run) passes.
3. Both models are measured on the same held-out tokens: consecutive, non-overlapping
   windows of the dataset's ``val_*`` shards, as long as the shorter of the two contexts
   and the run's ``seq_len`` allow. The new model runs in PyTorch from its checkpoint;
   the champion runs in ONNX Runtime from its registered fp32 model (the file its
   version serves; the export checks that it matches PyTorch to 1e-3 in the logits).
   The loss is the mean next-token cross-entropy in float64.
4. The gate: the new loss may exceed the champion's by at most ``--max-regression``
   (nats per token; default 0: no worse, up to the two runtimes' rounding, `ROUNDING`).
   The figures go to the run (metrics ``eval.heldout_loss``,
   ``eval.champion_heldout_loss``, tags ``eval.champion_version``, ``eval.gate``) and to
   ``--result`` as JSON.

Exit status: 0 passed; 1 the new model is worse (the pipeline stops; nothing is
registered); 2 an unusable checkpoint, dataset or champion, an untracked run, an
unreachable server.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from workloads.data.shard_format import HEADER_BYTES, ShardError, read_header, shard_files
from workloads.inference.card import CARD_FILE, FP32_FILE, INPUT_NAME, ModelCard, read_card
from workloads.inference.errors import ExportError
from workloads.inference.export import checkpoint_root
from workloads.inference.source import load_model, resolve_checkpoint
from workloads.inference.tokenizer import BYTE_TOKENIZER, BYTE_VOCAB_SIZE
from workloads.inference.triton import check_model_name
from workloads.tracking.registry import CHAMPION, RegistryError, call, make_client
from workloads.training.config import TrainConfig
from workloads.training.lineage import read_run_record

EXIT_PASSED = 0
EXIT_WORSE = 1
EXIT_USER_ERROR = 2
#: Held-out windows measured at most (of up to ``seq_len`` tokens each): 256 windows of
#: the tiny preset's 64 tokens are 16k tokens, a standard error of the mean loss well
#: under 1% of it, in a second or two on a CPU.
DEFAULT_MAX_WINDOWS = 256
#: The model artefact of a registered version this gate reads.
CHAMPION_FILES = (FP32_FILE, CARD_FILE)
#: The new model runs in PyTorch, the champion in ONNX Runtime: the same weights give
#: losses that differ in the last digits (measured 1e-9 on the tiny model), so "no
#: worse" allows this much, relative to the champion's loss; a retrained identical model
#: then passes whatever the rounding.
ROUNDING = 1e-6
_LOGGED_MODEL_SOURCE = re.compile(r"models:/(?P<id>m-[0-9a-f]+)")


class EvaluationError(RuntimeError):
    """Something the gate cannot measure, with what to do about it."""


@dataclass(frozen=True)
class Champion:
    """The registered champion: its version and where its fp32 model and card are."""

    version: str
    model_dir: Path
    card: ModelCard


@dataclass(frozen=True)
class Evaluation:
    """What the gate measured and decided.

    Args:
        run_id: the new model's MLflow run.
        name: the registered model it was compared within.
        heldout_loss: the new model's mean next-token cross-entropy.
        heldout_tokens: tokens it was measured on (targets).
        champion_version: the champion's version, empty when there is none.
        champion_heldout_loss: the champion's loss on the same tokens (None: none).
        max_regression: the allowed excess over the champion's loss.
        passed: whether the new model goes on.
    """

    run_id: str
    name: str
    heldout_loss: float
    heldout_tokens: int
    champion_version: str
    champion_heldout_loss: float | None
    max_regression: float
    passed: bool

    def describe(self) -> str:
        if not self.champion_version:
            return (
                f"evaluate: held-out loss {self.heldout_loss:.4f} on {self.heldout_tokens} "
                f"tokens; model {self.name!r} has no {CHAMPION!r} yet, so this run passes"
            )
        assert self.champion_heldout_loss is not None
        verdict = "no worse than" if self.passed else "WORSE than"
        allowance = f" + {self.max_regression:g} allowed" if self.max_regression else ""
        line = (
            f"evaluate: held-out loss {self.heldout_loss:.4f} is {verdict} the {CHAMPION} "
            f"(model {self.name!r} version {self.champion_version}) "
            f"{self.champion_heldout_loss:.4f}{allowance}, on the same {self.heldout_tokens} "
            "held-out tokens"
        )
        if not self.passed:
            line += (
                f"; the pipeline stops here and nothing is registered (run {self.run_id} keeps "
                "its figures: eval.heldout_loss, eval.champion_heldout_loss)"
            )
        return line


def cross_entropy(logits: npt.NDArray[np.floating[Any]], targets: npt.NDArray[np.int64]) -> float:
    """Mean next-token cross-entropy over every position, in float64."""
    flat = logits.reshape(-1, logits.shape[-1]).astype(np.float64)
    top = flat.max(axis=-1, keepdims=True)
    logsumexp = np.log(np.exp(flat - top).sum(axis=-1)) + top[:, 0]
    picked = flat[np.arange(flat.shape[0]), targets.reshape(-1)]
    return float((logsumexp - picked).mean())


def heldout_windows(data_dir: Path, length: int, max_windows: int) -> npt.NDArray[np.int64]:
    """``(n, length + 1)`` consecutive, non-overlapping windows of the dataset's held-out
    tokens (its ``val_*`` shards in name order), at most ``max_windows`` of them.

    Raises:
        EvaluationError: no held-out shard, or too few tokens for one window.
    """
    val = shard_files(data_dir, "val")
    if not val:
        raise EvaluationError(
            f"{data_dir} has no held-out shards (val_*.bin); the gate needs the dataset's "
            "validation split (make data writes one unless --val-fraction is 0)"
        )
    need = max_windows * (length + 1)
    parts: list[npt.NDArray[np.uint16]] = []
    have = 0
    for path in val:
        try:
            info = read_header(path)
        except ShardError as err:
            raise EvaluationError(str(err)) from err
        count = min(info.num_tokens, need - have)
        parts.append(np.fromfile(path, dtype="<u2", offset=HEADER_BYTES, count=count))
        have += count
        if have >= need:
            break
    tokens = np.concatenate(parts).astype(np.int64)
    windows = tokens.size // (length + 1)
    if windows < 1:
        raise EvaluationError(
            f"{data_dir}: {tokens.size} held-out tokens, fewer than one window of {length + 1}"
        )
    return tokens[: windows * (length + 1)].reshape(windows, length + 1)


def _champion(client: Any, uri: str, name: str, scratch: Path) -> Champion | None:
    """The champion's version, fp32 model and card, downloaded to ``scratch``; None when
    the model or its alias does not exist."""
    from mlflow.artifacts import download_artifacts  # noqa: PLC0415

    found = call(uri, lambda: client.search_registered_models(f"name = '{name}'"))
    model = next((m for m in found if m.name == name), None)
    if model is None or CHAMPION not in dict(model.aliases):
        return None
    version = call(uri, lambda: client.get_model_version(name, str(model.aliases[CHAMPION])))
    # `make register` makes a version whose source is its logged model (``models:/m-<id>``;
    # the server does not return the version's model_id); its files are at the logged
    # model's artifact location.
    logged = version.model_id or _LOGGED_MODEL_SOURCE.fullmatch(str(version.source))
    if logged:
        model_id = logged if isinstance(logged, str) else logged["id"]
        base = str(call(uri, lambda: client.get_logged_model(model_id)).artifact_location)
    else:
        base = str(version.source)
    target = scratch / "champion"
    target.mkdir(parents=True)
    for file in CHAMPION_FILES:
        where = f"{base.rstrip('/')}/{file}"
        call(
            uri,
            functools.partial(
                download_artifacts, artifact_uri=where, dst_path=str(target), tracking_uri=uri
            ),
            missing=(
                f"{CHAMPION} of model {name!r} (version {version.version}) has no {file} in "
                f"{base}; it was not registered by `make register`, so it cannot be measured: "
                "move the alias to a version that was, or register under another --name"
            ),
        )
    try:
        card = read_card(target)
    except ExportError as err:
        raise EvaluationError(f"{CHAMPION} version {version.version}: {err}") from err
    return Champion(str(version.version), target, card)


def _champion_loss(champion: Champion, windows: npt.NDArray[np.int64]) -> float:
    import onnxruntime as ort  # noqa: PLC0415

    session = ort.InferenceSession(
        str(champion.model_dir / FP32_FILE), providers=["CPUExecutionProvider"]
    )
    logits = session.run(None, {INPUT_NAME: windows[:, :-1]})[0]
    return cross_entropy(np.asarray(logits), windows[:, 1:])


def _new_loss(step_dir: Path, config: TrainConfig, windows: npt.NDArray[np.int64]) -> float:
    import torch  # noqa: PLC0415

    model = load_model(step_dir, config)
    with torch.no_grad():
        logits = model.logits(torch.from_numpy(windows[:, :-1])).float().numpy()
    return cross_entropy(logits, windows[:, 1:])


def _log(client: Any, uri: str, result: Evaluation) -> None:
    """The figures on the new model's run (it has finished; MLflow takes them still)."""
    from mlflow.entities import Metric, RunTag  # noqa: PLC0415

    now = int(time.time() * 1000)
    metrics = [Metric("eval.heldout_loss", result.heldout_loss, now, 0)]
    if result.champion_heldout_loss is not None:
        metrics.append(Metric("eval.champion_heldout_loss", result.champion_heldout_loss, now, 0))
    tags = [
        RunTag("eval.champion_version", result.champion_version or "none"),
        RunTag("eval.gate", "passed" if result.passed else "failed"),
    ]
    call(uri, lambda: client.log_batch(result.run_id, metrics=metrics, tags=tags))
    call(uri, lambda: client.log_dict(result.run_id, dataclasses.asdict(result), "evaluation.json"))


def evaluate(
    checkpoint: Path,
    data_dir: Path,
    uri: str,
    *,
    name: str = "",
    max_regression: float = 0.0,
    max_windows: int = DEFAULT_MAX_WINDOWS,
) -> Evaluation:
    """Measure the new model (and the champion) and decide; see the module docstring.

    Raises:
        EvaluationError, RegistryError, ExportError: what cannot be measured.
    """
    if max_regression < 0:
        raise EvaluationError(f"--max-regression must be >= 0, got {max_regression}")
    if max_windows < 1:
        raise EvaluationError(f"--max-windows must be positive, got {max_windows}")
    _, step_dir = resolve_checkpoint(checkpoint)
    try:
        record = read_run_record(checkpoint_root(step_dir))
    except ValueError as err:
        raise EvaluationError(str(err)) from err
    if record is None:
        raise EvaluationError(f"{checkpoint} has no run.json; it was not written by training")
    if not record.tracking_run_id:
        raise EvaluationError(
            f"the training run of {checkpoint} was not tracked (no MLflow run id in its "
            "run.json: the tracking server was unreachable when training started), so there "
            "is nothing to register; run the pipeline again with the server up"
        )
    config = dataclasses.replace(record.config, data_dir=str(data_dir))
    name = name or config.preset
    # The name registration will give the model and its Triton models: refused here,
    # before anything is measured, rather than after the export.
    check_model_name(name)
    check_model_name(f"{name}-int8")
    client = make_client(uri)
    scratch = Path(tempfile.mkdtemp(prefix="evaluate-"))
    try:
        champion = _champion(client, uri, name, scratch)
        length = min(config.seq_len, config.model.block_size)
        if champion is not None:
            card, tokenizer = champion.card, _tokenizer(config)
            if (card.vocab_size, card.tokenizer) != (config.model.vocab_size, tokenizer):
                raise EvaluationError(
                    f"cannot compare with the {CHAMPION} of {name!r} (version "
                    f"{champion.version}): its vocabulary is {card.vocab_size} ({card.tokenizer}), "
                    f"this run's {config.model.vocab_size} ({tokenizer}); register this model "
                    "under another name (--name) or move the alias"
                )
            length = min(length, card.context_length)
        windows = heldout_windows(data_dir, length, max_windows)
        new = _new_loss(step_dir, config, windows)
        old = _champion_loss(champion, windows) if champion is not None else None
        passed = old is None or new <= old * (1 + ROUNDING) + max_regression
        result = Evaluation(
            run_id=record.tracking_run_id,
            name=name,
            heldout_loss=new,
            heldout_tokens=int(windows[:, 1:].size),
            champion_version=champion.version if champion else "",
            champion_heldout_loss=old,
            max_regression=max_regression,
            passed=passed,
        )
        _log(client, uri, result)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return result


def _tokenizer(config: TrainConfig) -> str:
    """The tokenizer the export names on a model card of this config."""
    return BYTE_TOKENIZER if config.model.vocab_size == BYTE_VOCAB_SIZE else "external"


def _write(path: Path | None, text: str) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.tracking.evaluate",
        description="Compare a trained checkpoint's held-out loss with the registered champion's.",
    )
    parser.add_argument("checkpoint", type=Path, help="the run's --ckpt-dir (or a step_<N>)")
    parser.add_argument("--data-dir", type=Path, required=True, help="the dataset it trained on")
    parser.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000"),
        help="tracking server (default: MLFLOW_TRACKING_URI, else http://127.0.0.1:5000)",
    )
    parser.add_argument("--name", default="", help="registered model (default: the preset)")
    parser.add_argument(
        "--max-regression",
        type=float,
        default=0.0,
        help="how much higher than the champion's the loss may be (nats/token; default 0)",
    )
    parser.add_argument("--max-windows", type=int, default=DEFAULT_MAX_WINDOWS)
    parser.add_argument("--result", type=Path, help="write the evaluation here as JSON")
    parser.add_argument("--run-id-out", type=Path, help="write the run id here")
    parser.add_argument("--name-out", type=Path, help="write the registered model's name here")
    args = parser.parse_args(argv)
    try:
        result = evaluate(
            args.checkpoint,
            args.data_dir,
            args.tracking_uri,
            name=args.name.strip(),
            max_regression=args.max_regression,
            max_windows=args.max_windows,
        )
    except (EvaluationError, RegistryError, ExportError) as err:
        print(f"evaluate: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    _write(args.result, json.dumps(dataclasses.asdict(result), indent=2) + "\n")
    _write(args.run_id_out, result.run_id)
    _write(args.name_out, result.name)
    print(result.describe(), file=sys.stdout if result.passed else sys.stderr)
    return EXIT_PASSED if result.passed else EXIT_WORSE


if __name__ == "__main__":
    sys.exit(main())
