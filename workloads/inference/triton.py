"""A Triton model repository for the ONNX models of an export.

Layout (what ``tritonserver --model-store=<root>`` loads)::

    <root>/<model>/config.pbtxt
    <root>/<model>/1/model.onnx

One model directory per variant: ``<name>`` (fp32) and ``<name>-int8``, the names
`make serve` gives the same models. Each ``config.pbtxt`` is a ``ModelConfig`` in
protobuf text format, written from the ONNX graph itself:

* ``backend: "onnxruntime"``: Triton's ONNX Runtime backend (CUDA execution provider on
  a GPU instance, with ONNX Runtime's CPU kernels for any operator CUDA lacks, such as
  the int8 model's dynamic quantisation ops).
* ``max_batch_size`` > 0 with ``dynamic_batching``: Triton joins concurrent requests
  into one call along the first axis, so every input's and output's first axis must
  be the graph's dynamic batch axis, and the declared ``dims`` leave it out. Only
  requests of equal sequence length are joined (Triton batches equal shapes). Rows of
  the fp32 model never see each other; the int8 model quantises activations with one
  scale per tensor at run time, so a batch companion moves a row's logits slightly
  (about 2e-3 on the tiny model), as in the CPU predictor's own batches.
* ``instance_group``: one instance on the GPU the pod is given (an InferenceService
  replica gets exactly one).
* inputs and outputs: the graph's names and element types; ``-1`` for each dynamic
  axis (the sequence), the size for each fixed one (the logit rows).

The model files are hard links to the export's own ``model.onnx`` and
``model.int8.onnx`` where the file system allows (no second copy of the bytes), else
copies; either way the tree is an ordinary directory tree that Triton (or KServe's
storage initializer, after an upload) reads as is.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import onnx

from workloads.inference.errors import ExportError
from workloads.layout import MODEL_NAME

CONFIG_FILE = "config.pbtxt"
MODEL_FILE = "model.onnx"  # the onnxruntime backend's default_model_filename
#: Each registered version gets a repository of its own (its own storage path), so the
#: Triton version inside it is always 1.
VERSION = 1
BACKEND = "onnxruntime"
#: Most requests one batched call may join. 32 is the most concurrent clients
#: `make bench-serve` measures (1, 8, 32), so one call can answer all of them; the
#: logits budget below lowers it for models whose full-context logits are large.
MAX_BATCH_SIZE = 32
#: Largest logits tensor (bytes) one batched call may produce at full context: the
#: output is ``batch x context x logit rows`` float32, which for GPT-2's 50k-row
#: vocabulary at 1024 tokens is ~206 MB a row, so batches stay below ~1 GiB of
#: activations' output on the GPU.
LOGITS_BUDGET_BYTES = 1 << 30
#: How long Triton holds a request for companions: the CPU predictor waits 5 ms too.
MAX_QUEUE_DELAY_US = 5000

#: ONNX element types -> Triton data types (model_config.proto ``DataType``).
_TRITON_TYPES: dict[int, str] = {
    onnx.TensorProto.BOOL: "TYPE_BOOL",
    onnx.TensorProto.UINT8: "TYPE_UINT8",
    onnx.TensorProto.UINT16: "TYPE_UINT16",
    onnx.TensorProto.UINT32: "TYPE_UINT32",
    onnx.TensorProto.UINT64: "TYPE_UINT64",
    onnx.TensorProto.INT8: "TYPE_INT8",
    onnx.TensorProto.INT16: "TYPE_INT16",
    onnx.TensorProto.INT32: "TYPE_INT32",
    onnx.TensorProto.INT64: "TYPE_INT64",
    onnx.TensorProto.FLOAT16: "TYPE_FP16",
    onnx.TensorProto.FLOAT: "TYPE_FP32",
    onnx.TensorProto.DOUBLE: "TYPE_FP64",
    onnx.TensorProto.BFLOAT16: "TYPE_BF16",
    onnx.TensorProto.STRING: "TYPE_STRING",
}


@dataclass(frozen=True)
class Tensor:
    """One graph input or output as Triton declares it.

    Args:
        name: the graph's tensor name.
        data_type: Triton's ``DataType`` name (``TYPE_INT64``).
        dims: the shape without the batch axis; -1 for a dynamic axis.
    """

    name: str
    data_type: str
    dims: tuple[int, ...]


def _tensor(value: onnx.ValueInfoProto, path: Path) -> Tensor:
    kind = value.type.tensor_type
    data_type = _TRITON_TYPES.get(kind.elem_type)
    if data_type is None:
        raise ExportError(f"{path}: {value.name} has an element type Triton does not take")
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in kind.shape.dim]
    if not dims or dims[0] != -1:
        raise ExportError(
            f"{path}: {value.name}'s first axis is not the dynamic batch axis ({dims}); "
            "Triton's dynamic batching needs one"
        )
    return Tensor(value.name, data_type, tuple(dims[1:]))


def graph_tensors(path: Path) -> tuple[list[Tensor], list[Tensor]]:
    """(inputs, outputs) of the ONNX graph at ``path`` as Triton declares them."""
    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {init.name for init in graph.initializer}
    inputs = [_tensor(v, path) for v in graph.input if v.name not in initializers]
    return inputs, [_tensor(v, path) for v in graph.output]


def max_batch_size(context_length: int, logit_rows: int) -> int:
    """`MAX_BATCH_SIZE`, lowered so one call's full-context logits fit the budget."""
    row_bytes = context_length * logit_rows * 4
    return max(1, min(MAX_BATCH_SIZE, LOGITS_BUDGET_BYTES // max(1, row_bytes)))


def _tensor_text(tensor: Tensor) -> str:
    dims = ", ".join(str(d) for d in tensor.dims)
    return (
        "  {\n"
        f'    name: "{tensor.name}"\n'
        f"    data_type: {tensor.data_type}\n"
        f"    dims: [ {dims} ]\n"
        "  }"
    )


def config_text(name: str, inputs: list[Tensor], outputs: list[Tensor], batch: int) -> str:
    """The ``config.pbtxt`` of one model (protobuf text format of ``ModelConfig``)."""
    return (
        f'name: "{name}"\n'
        f'backend: "{BACKEND}"\n'
        f"max_batch_size: {batch}\n"
        "input [\n" + ",\n".join(_tensor_text(t) for t in inputs) + "\n]\n"
        "output [\n" + ",\n".join(_tensor_text(t) for t in outputs) + "\n]\n"
        "instance_group [\n  {\n    count: 1\n    kind: KIND_GPU\n  }\n]\n"
        "dynamic_batching {\n"
        f"  max_queue_delay_microseconds: {MAX_QUEUE_DELAY_US}\n"
        "}\n"
        "version_policy {\n  latest {\n    num_versions: 1\n  }\n}\n"
    )


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copyfile(source, target)


def check_model_name(name: str) -> None:
    """`ExportError` unless ``name`` can name a Triton model."""
    if not MODEL_NAME.match(name):
        raise ExportError(
            f"{name!r} cannot name a Triton model (it is a directory and URL name): use "
            "letters, digits, '_', '.' and '-'"
        )


def write_repository(
    root: Path, models: Mapping[str, Path], *, context_length: int, logit_rows: int
) -> list[Path]:
    """Write a Triton model repository at ``root`` (which must not exist yet) with one
    model per ``{name: ONNX file}``; returns the config files written."""
    for name in models:
        check_model_name(name)
    batch = max_batch_size(context_length, logit_rows)
    configs = []
    root.mkdir(parents=True)
    for name, source in models.items():
        inputs, outputs = graph_tensors(source)
        version_dir = root / name / str(VERSION)
        version_dir.mkdir(parents=True)
        _link_or_copy(source, version_dir / MODEL_FILE)
        config = root / name / CONFIG_FILE
        config.write_text(config_text(name, inputs, outputs, batch), encoding="utf-8")
        configs.append(config)
    return configs
