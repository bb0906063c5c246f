"""``make export CHECKPOINT=<dir>``: a DCP checkpoint to an ONNX model, an int8 model
and a model card, with parity checked before anything is put in place.

1. The checkpoint (any world size) is loaded into the model on the CPU
   (`workloads.inference.source`); the config comes from the run record the training
   run left in the checkpoint directory, else from ``--preset`` and overrides.
2. ``torch.onnx.export`` (the dynamo exporter) writes the KV-free forward, token ids
   ``(batch, sequence)`` -> logits ``(batch, sequence, vocab)``, both axes dynamic.
3. ONNX Runtime's quantisation tool writes the int8 model: dynamic quantisation of
   the MatMul weights (int8, per output channel), activations quantised at run time.
4. Parity on held-out tokens (the ``val_*.bin`` shards): the fp32 ONNX logits must
   match PyTorch's within ``--logit-atol``, and the int8 model's loss may exceed the
   fp32 model's by at most ``--int8-loss-margin`` (relative). A failure fails the export.
5. A Triton model repository (`workloads.inference.triton`) is written beside the
   ONNX files: ``triton/<name>/`` (fp32) and ``triton/<name>-int8/``, each a
   ``config.pbtxt`` and ``1/model.onnx`` (a hard link to the export's file).
6. Everything is written to a hidden temporary directory beside the output, which is
   swapped into place only when every step passed: an output directory with a model
   card is always a finished, checked export. One export at a time writes an output:
   a second one to the same output stops at once (the lock ``<OUT>.lock`` beside it,
   `workloads.output_lock`), and a lock a crashed export left is taken over, saying so.

The export never destroys what it did not make. ``--out`` may be absent, an empty
directory, or an earlier export (a readable model card and only the files an export
writes); anything else is refused before any work, and so is an output inside, equal
to, or containing the checkpoint directory. An earlier export is replaced by renaming
it aside, renaming the new one in and only then deleting the old one; a failure on the
way leaves the earlier export whole.

Exit status: 0 written, 2 bad checkpoint / config / output (another export writing it) /
failed parity, 130 interrupted (Ctrl-C; the output unchanged).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import logging
import shutil
import sys
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import torch
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)

from modules.validation import InvalidArgsError
from workloads import output_lock
from workloads.data.byte_tokenizer import BYTE_VOCAB_SIZE, tokenize_files
from workloads.data.shards import HEADER_BYTES, ShardError, read_header, shard_files
from workloads.inference.card import (
    CARD_FILE,
    FP32_FILE,
    INPUT_NAME,
    INT8_FILE,
    OUTPUT_NAME,
    ModelCard,
    Parity,
)
from workloads.inference.drift import (
    REFERENCE_FILE,
    DriftReferenceError,
    build_reference,
    shard_prompts,
)
from workloads.inference.errors import ExportError
from workloads.inference.source import load_model, resolve_checkpoint
from workloads.inference.tokenizer import BYTE_TOKENIZER
from workloads.inference.triton import CONFIG_FILE, MODEL_FILE, check_model_name, write_repository
from workloads.layout import TRITON_DIR
from workloads.training.checkpoint import STEP_PREFIX
from workloads.training.config import (
    DEFAULT_DATA_DIR,
    TrainConfig,
    add_override_arguments,
    describe_problems,
    override,
    override_values,
    preset,
)
from workloads.training.lineage import git_revision, read_run_record
from workloads.training.model import GPT

EXIT_OK = 0
EXIT_USER_ERROR = 2
#: Interrupted (Ctrl-C): 128 + SIGINT, as a shell reports a command SIGINT stopped.
EXIT_INTERRUPTED = 130
DEFAULT_EXPORT_ROOT = Path("build/export")
#: fp32 ONNX vs PyTorch: the same math in another kernel order; differences are
#: rounding (~1e-6 on the tiny model), so 1e-3 on logits is tight yet robust to depth.
DEFAULT_LOGIT_ATOL = 1e-3
#: int8 may raise the held-out loss by at most 2% of the fp32 loss.
DEFAULT_INT8_LOSS_MARGIN = 0.02
DEFAULT_HELDOUT_SEQUENCES = 8


@dataclass(frozen=True)
class ExportOptions:
    """Checks and choices of one export.

    Args:
        logit_atol: largest allowed |ONNX fp32 - PyTorch| logit difference.
        int8_loss_margin: allowed relative increase of the int8 loss over fp32.
        heldout_sequences: held-out sequences (of the run's ``seq_len``) to measure on.
        per_channel: int8 weight scales per output channel (more accurate) or per tensor.
    """

    logit_atol: float = DEFAULT_LOGIT_ATOL
    int8_loss_margin: float = DEFAULT_INT8_LOSS_MARGIN
    heldout_sequences: int = DEFAULT_HELDOUT_SEQUENCES
    per_channel: bool = True


class _LogitsOnly(torch.nn.Module):
    """The exported forward: token ids -> logits, no loss, no cache."""

    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.model.logits(token_ids)


def export_onnx(model: GPT, path: Path) -> int:
    """Write ``model``'s forward to ``path`` with dynamic batch and sequence axes;
    returns the opset."""
    example = torch.zeros((2, min(8, model.config.block_size)), dtype=torch.long)
    batch = torch.export.Dim("batch", min=1, max=4096)
    sequence = torch.export.Dim("sequence", min=1, max=model.config.block_size)
    # The exporter narrates each stage on stdout and warns about optional packages
    # (torchvision's operators) it does not need here.
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            _LogitsOnly(model),
            (example,),
            dynamo=True,
            dynamic_shapes={"token_ids": {0: batch, 1: sequence}},
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            external_data=False,
        )
    if program is None:
        raise ExportError("torch.onnx.export returned no program")
    program.save(str(path), external_data=False)
    opsets = {entry.domain: entry.version for entry in onnx.load(str(path)).opset_import}
    return int(opsets.get("", opsets.get("ai.onnx", 0)))


def quantize_int8(fp32: Path, int8: Path, per_channel: bool) -> None:
    """Dynamic int8 quantisation of the MatMul weights (ONNX Runtime's tool)."""
    # The tool logs a pre-processing hint on the root logger; the exporter's graph is
    # already optimised and shape-inferred.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        _quantize(fp32, int8, per_channel)
    finally:
        root.setLevel(level)


def _quantize(fp32: Path, int8: Path, per_channel: bool) -> None:
    quantize_dynamic(
        str(fp32),
        str(int8),
        op_types_to_quantize=["MatMul"],
        weight_type=QuantType.QInt8,
        per_channel=per_channel,
    )


class _Windows(CalibrationDataReader):  # type: ignore[misc]  # onnxruntime ships no types
    """Calibration batches for static quantisation: one token window at a time."""

    def __init__(self, windows: npt.NDArray[np.int64]) -> None:
        self._rows = iter(windows)

    def get_next(self) -> dict[str, npt.NDArray[np.int64]] | None:
        row = next(self._rows, None)
        return None if row is None else {INPUT_NAME: row[None, :]}


def quantize_int8_static(
    fp32: Path, int8: Path, calibration: npt.NDArray[np.int64], per_channel: bool
) -> None:
    """Static int8 quantisation of the MatMuls (QDQ, activation ranges calibrated with
    MinMax on ``calibration`` token windows): measured against the dynamic variant by
    `make bench-infer` (engine ``ort-int8-static``); the export keeps the dynamic one,
    which measured better (BENCHMARKS.md)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        quantize_static(
            str(fp32),
            str(int8),
            _Windows(calibration),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=["MatMul"],
            per_channel=per_channel,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
    finally:
        root.setLevel(level)


def heldout_tokens(config: TrainConfig, sequences: int) -> npt.NDArray[np.int64]:
    """``(n, seq_len + 1)`` held-out token windows from the run's ``val_*`` shards
    (the shipped corpus's validation split when the data directory has none)."""
    val = shard_files(Path(config.data_dir), "val")
    if not val:
        scratch = Path(tempfile.mkdtemp(prefix="export-heldout-"))
        try:
            _, val = tokenize_files([Path(config.corpus)], scratch)
            return _windows(val, config, sequences)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return _windows(val, config, sequences)


def _windows(val: Sequence[Path], config: TrainConfig, sequences: int) -> npt.NDArray[np.int64]:
    info = read_header(val[0])
    tokens = np.fromfile(val[0], dtype="<u2", offset=HEADER_BYTES, count=info.num_tokens)
    length = min(config.seq_len, config.model.block_size, tokens.size - 1)
    if length < 2:
        raise ExportError(f"{val[0]}: too few held-out tokens to check parity")
    starts = np.linspace(0, tokens.size - length - 1, num=sequences).astype(np.int64)
    return np.stack([tokens[s : s + length + 1] for s in starts]).astype(np.int64)


def _loss(logits: npt.NDArray[np.floating], targets: npt.NDArray[np.int64]) -> float:
    flat = logits.reshape(-1, logits.shape[-1]).astype(np.float64)
    top = flat.max(axis=-1, keepdims=True)
    logsumexp = np.log(np.exp(flat - top).sum(axis=-1)) + top[:, 0]
    picked = flat[np.arange(flat.shape[0]), targets.reshape(-1)]
    return float((logsumexp - picked).mean())


def check_parity(
    model: GPT, fp32: Path, int8: Path, windows: npt.NDArray[np.int64], options: ExportOptions
) -> Parity:
    """Measure parity; `ExportError` when a figure is outside its bound."""
    inputs, targets = windows[:, :-1], windows[:, 1:]
    with torch.no_grad():
        reference = model.logits(torch.from_numpy(inputs)).numpy()
    sessions = {
        name: ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        for name, path in (("fp32", fp32), ("int8", int8))
    }
    out = {name: s.run(None, {INPUT_NAME: inputs})[0] for name, s in sessions.items()}
    parity = Parity(
        heldout_tokens=int(targets.size),
        fp32_max_abs_logit_diff=float(np.abs(out["fp32"] - reference).max()),
        fp32_logit_atol=options.logit_atol,
        torch_loss=_loss(reference, targets),
        fp32_loss=_loss(out["fp32"], targets),
        int8_loss=_loss(out["int8"], targets),
        int8_loss_margin=options.int8_loss_margin,
    )
    if not parity.fp32_max_abs_logit_diff <= options.logit_atol:
        raise ExportError(
            f"parity failed: fp32 ONNX logits differ from PyTorch by up to "
            f"{parity.fp32_max_abs_logit_diff:.3g} (allowed {options.logit_atol:g}); "
            "nothing was written"
        )
    allowed = parity.fp32_loss * (1 + options.int8_loss_margin)
    if not parity.int8_loss <= allowed:
        raise ExportError(
            f"parity failed: int8 loss {parity.int8_loss:.4f} exceeds the fp32 loss "
            f"{parity.fp32_loss:.4f} by more than {100 * options.int8_loss_margin:g}% "
            f"(limit {allowed:.4f}); nothing was written"
        )
    return parity


def export_source(
    step_dir: Path, step: int, config: TrainConfig, run_id: str, revision: str
) -> dict[str, str]:
    """Where an export came from (its card's and `hf_export.json`'s ``source``)."""
    return {
        "checkpoint": str(step_dir.resolve()),
        "step": str(step),
        "preset": config.preset,
        "run_id": run_id,
        "git_revision": revision or git_revision(),
        "exported_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def checkpoint_root(step_dir: Path) -> Path:
    """The checkpoint directory a step belongs to (its ``--ckpt-dir``, with ``run.json``
    and every ``step_<N>``), or the directory itself for a bare DCP checkpoint."""
    return step_dir.parent if step_dir.name.startswith(STEP_PREFIX) else step_dir


#: What an export writes at its top level (`_foreign_entries` allows these only).
_EXPORT_FILES = {CARD_FILE, FP32_FILE, INT8_FILE, REFERENCE_FILE}
_SHOWN_ENTRIES = 6


def _is_card(path: Path) -> bool:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(body, dict) and isinstance(body.get("files"), dict) and "format" in body


def _written_by_export(rel: Path, path: Path) -> bool:
    """Whether ``rel`` (inside an output directory) is a file an export writes."""
    parts = rel.parts
    if path.is_symlink():
        return False
    if len(parts) == 1:
        return path.is_dir() if parts[0] == TRITON_DIR else parts[0] in _EXPORT_FILES
    if parts[0] != TRITON_DIR:
        return False
    if len(parts) == 2:  # triton/<model>
        return path.is_dir()
    if len(parts) == 3:  # triton/<model>/config.pbtxt or triton/<model>/<version>
        return parts[2] == CONFIG_FILE if path.is_file() else parts[2].isdigit()
    return len(parts) == 4 and parts[2].isdigit() and parts[3] == MODEL_FILE and path.is_file()


def _foreign_entries(out: Path) -> tuple[str, list[str]]:
    """Why ``out`` is not replaceable and what it holds that an export did not write;
    ``("", [])`` when it is absent, empty or an earlier export."""
    if not out.exists():
        return "", []
    if not out.is_dir():
        return "it is a file, not a directory", []
    entries = sorted(out.iterdir())
    if not entries:
        return "", []
    shown = [p.name + ("/" if p.is_dir() else "") for p in entries]
    if not _is_card(out / CARD_FILE):
        return f"it is not empty and has no readable {CARD_FILE}", shown
    foreign = [
        str(p.relative_to(out)) + ("/" if p.is_dir() else "")
        for p in sorted(out.rglob("*"))
        if not _written_by_export(p.relative_to(out), p)
    ]
    if foreign:
        return "it is an export with files an export does not write", foreign
    return "", []


def check_output(out: Path, checkpoint: Path) -> None:
    """`ExportError` (naming the directory, nothing changed) unless ``out`` may receive
    an export of the checkpoint directory ``checkpoint``: absent, empty or an earlier
    export, and neither inside, equal to nor containing the checkpoint directory."""
    target, root = out.resolve(), checkpoint.resolve()
    where = None
    if target == root:
        where = "is the checkpoint directory"
    elif root in target.parents:
        where = f"is inside the checkpoint directory {checkpoint}"
    elif target in root.parents:
        where = f"contains the checkpoint directory {checkpoint}"
    if where is not None:
        raise ExportError(
            f"OUT {out} {where}; an export never writes into a checkpoint. Choose an OUT= "
            f"outside it (the default is {DEFAULT_EXPORT_ROOT}/<checkpoint dir>-step<N>)."
        )
    if out.is_symlink():
        raise ExportError(
            f"OUT {out} is a symbolic link; give the directory it points to, or another OUT="
        )
    reason, entries = _foreign_entries(out)
    if reason:
        listed = ", ".join(entries[:_SHOWN_ENTRIES])
        more = len(entries) - _SHOWN_ENTRIES
        held = (
            f"\n  it holds: {listed}" + (f" (and {more} more)" if more > 0 else "")
            if entries
            else ""
        )
        raise ExportError(
            f"OUT {out} is not an earlier export ({reason}); refusing to replace it.{held}\n"
            f"Nothing in {out} was changed. Give an OUT= that is absent, empty or an earlier "
            "export, or move the folder away yourself."
        )


def _cannot_write(out: Path, err: OSError) -> ExportError:
    return ExportError(f"cannot write the export to {out} ({err.strerror}); choose a writable OUT=")


def _prepare_output(out: Path) -> Path:
    """A fresh hidden directory beside ``out`` (same file system, so the final rename
    is atomic); `ExportError` when ``out``'s folder cannot be written."""
    try:
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    except OSError as err:
        raise _cannot_write(out, err) from err


def _lock_output(out: Path) -> output_lock.Lock:
    """``out``'s lock (`workloads.output_lock`), its folder made first where missing."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _cannot_write(out, err) from err
    try:
        return output_lock.acquire(
            out, f"OUT {out}", lambda line: print(f"export: {line}", file=sys.stderr)
        )
    except output_lock.OutputLockError as err:
        raise ExportError(str(err)) from err


def export_checkpoint(
    checkpoint: Path,
    out: Path,
    config: TrainConfig,
    *,
    options: ExportOptions | None = None,
    run_id: str = "",
    revision: str = "",
) -> ModelCard:
    """Export ``checkpoint`` (a step directory or a checkpoint root) to ``out``.

    Raises:
        ExportError: unreadable or mismatched checkpoint, an output that is not
            absent, empty or an earlier export (or is inside, equal to or containing the
            checkpoint directory), unwritable output, failed parity. Nothing at ``out``
            changes then (an earlier export there is kept whole).
    """
    options = options or ExportOptions()
    step, step_dir = resolve_checkpoint(checkpoint)
    root = checkpoint_root(step_dir)
    check_output(out, root)  # before any work: a refused OUT costs nothing
    check_model_name(out.name)
    lock = _lock_output(out)  # one export at a time into ``out``
    try:
        # Again under the lock: an export that just ended may have written OUT.
        check_output(out, root)
        return _export(
            step_dir,
            out,
            config,
            step=step,
            root=root,
            options=options,
            run_id=run_id,
            revision=revision,
        )
    finally:
        lock.release()


def _export(
    step_dir: Path,
    out: Path,
    config: TrainConfig,
    *,
    step: int,
    root: Path,
    options: ExportOptions,
    run_id: str,
    revision: str,
) -> ModelCard:
    """`export_checkpoint`'s work, under ``out``'s lock."""
    model = load_model(step_dir, config)
    windows = heldout_tokens(config, options.heldout_sequences)
    tmp = _prepare_output(out)
    try:
        opset = export_onnx(model, tmp / FP32_FILE)
        quantize_int8(tmp / FP32_FILE, tmp / INT8_FILE, options.per_channel)
        parity = check_parity(model, tmp / FP32_FILE, tmp / INT8_FILE, windows, options)
        card = ModelCard(
            name=out.name,
            model=config.model,
            vocab_size=config.model.vocab_size,
            logit_rows=model.vocab_rows,
            tokenizer=BYTE_TOKENIZER if config.model.vocab_size == BYTE_VOCAB_SIZE else "external",
            opset=opset,
            files={"fp32": FP32_FILE, "int8": INT8_FILE},
            quantization={
                "method": "dynamic",
                "op_types": "MatMul",
                "weights": "int8 " + ("per-channel" if options.per_channel else "per-tensor"),
                "activations": "uint8, quantised at run time",
            },
            source=export_source(step_dir, step, config, run_id, revision),
            parity=parity,
            versions={
                "torch": torch.__version__,
                "onnx": onnx.__version__,
                "onnxruntime": ort.__version__,
            },
        )
        (tmp / CARD_FILE).write_text(card.to_json(), encoding="utf-8")
        # The training data's input statistics, stored with the model version: the
        # model server's drift scores compare live prompts against exactly these.
        try:
            reference = build_reference(
                shard_prompts(Path(config.data_dir)),
                config.model.vocab_size,
                f"train shards of {config.data_dir}",
            )
        except DriftReferenceError as err:
            raise ExportError(f"drift reference: {err}") from err
        (tmp / REFERENCE_FILE).write_text(reference.to_json(), encoding="utf-8")
        # Triton serves the same two files: hard links, not copies.
        write_repository(
            tmp / TRITON_DIR,
            {out.name: tmp / FP32_FILE, f"{out.name}-int8": tmp / INT8_FILE},
            context_length=config.model.block_size,
            logit_rows=model.vocab_rows,
        )
        check_output(out, root)  # again: the export took minutes, OUT may have changed
        output_lock.swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return card


def config_for(checkpoint: Path, args: argparse.Namespace) -> tuple[TrainConfig, str, str]:
    """The run's config (its run record, or ``--preset``), with command-line overrides
    applied; also the run id and git revision the record names."""
    root = checkpoint if not checkpoint.name.startswith("step_") else checkpoint.parent
    try:
        record = read_run_record(root) if root.is_dir() else None
    except ValueError as err:
        raise ExportError(str(err)) from err
    values = override_values(args)
    base = record.config if record is not None else preset(args.preset)
    if record is None and "data_dir" not in values:
        values["data_dir"] = DEFAULT_DATA_DIR
    config = override(base, values)
    if record is None:
        return config, "", ""
    return config, record.tracking_run_id, record.git_revision


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.inference.export",
        description="Export a DCP checkpoint to ONNX (fp32 and int8) with a model card.",
    )
    parser.add_argument("checkpoint", type=Path, help="a step_<N> directory or a --ckpt-dir")
    parser.add_argument("--out", type=Path, help="output directory (default build/export/NAME)")
    parser.add_argument("--name", help="export name (default: <checkpoint dir>-step<N>)")
    parser.add_argument("--run-id", default="", help="tracking run id for the model card")
    parser.add_argument("--logit-atol", type=float, default=DEFAULT_LOGIT_ATOL)
    parser.add_argument("--int8-loss-margin", type=float, default=DEFAULT_INT8_LOSS_MARGIN)
    parser.add_argument("--per-tensor", action="store_true", help="int8 scales per tensor")
    add_override_arguments(parser)
    return parser


def _say(line: str) -> None:
    print(f"export: {line}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config, run_id, revision = config_for(args.checkpoint, args)
        if args.out is not None:
            # OUT's problems first (each check costs nothing): a user's folder or an OUT
            # another run is writing is named whatever the checkpoint holds. The lock is
            # only probed here; `export_checkpoint` takes it for the export.
            check_output(args.out, checkpoint_root(args.checkpoint))
            _lock_output(args.out).release()
        step, step_dir = resolve_checkpoint(args.checkpoint, say=_say)
        root = step_dir.parent
        name = args.name or f"{root.name}-step{step}"
        out = args.out or DEFAULT_EXPORT_ROOT / name
        options = ExportOptions(
            logit_atol=args.logit_atol,
            int8_loss_margin=args.int8_loss_margin,
            per_channel=not args.per_tensor,
        )
        card = export_checkpoint(
            step_dir, out, config, options=options, run_id=args.run_id or run_id, revision=revision
        )
    except InvalidArgsError as err:
        print(describe_problems(err, "export config"), file=sys.stderr)
        return EXIT_USER_ERROR
    except (ExportError, ShardError) as err:
        print(f"export: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as err:  # a full or failing disk: the earlier export is kept whole
        print(
            f"export: cannot write the export ({err.strerror or err}); nothing at the output "
            "was changed",
            file=sys.stderr,
        )
        return EXIT_USER_ERROR
    except KeyboardInterrupt:  # its temporary directory is gone, its lock released
        print("export: interrupted; nothing at the output was changed", file=sys.stderr)
        return EXIT_INTERRUPTED
    p = card.parity
    print(
        f"export: {out}/ ({FP32_FILE}, {INT8_FILE}, {CARD_FILE}, {REFERENCE_FILE}, "
        f"{TRITON_DIR}/); "
        f"step {step}, opset {card.opset}"
    )
    print(
        f"export: parity on {p.heldout_tokens} held-out tokens: max |logit diff| "
        f"{p.fp32_max_abs_logit_diff:.2e} (<= {p.fp32_logit_atol:g}); loss torch "
        f"{p.torch_loss:.4f}, fp32 {p.fp32_loss:.4f}, int8 {p.int8_loss:.4f} "
        f"(<= +{100 * p.int8_loss_margin:g}%)"
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
