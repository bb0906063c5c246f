"""Float8 training through torchao (``--float8 tensorwise|rowwise``).

`convert` swaps each transformer block's ``nn.Linear`` (attention QKV and output
projections, MLP up and down projections) for torchao's ``Float8Linear``, which casts
its input, weight and output gradient to float8 (e4m3 forward, e5m2 gradients) with
dynamic scales and runs the three matmuls of forward and backward in float8 on the
tensor cores, accumulating in higher precision. The weights themselves stay fp32 (the
optimizer and checkpoints are unchanged: a float8 run's checkpoint is an ordinary one
that a bf16 or fp32 run resumes and `make export` exports).

- ``tensorwise``: one scale per tensor; the fastest recipe.
- ``rowwise``: one scale per row (axiswise), more accurate where rows differ in
  magnitude, somewhat slower.

Left in bf16: the LM head (tied to the token embedding, whose lookup is not a matmul,
and the loss is sensitive to its precision, as torchtitan also leaves its output layer
out), and any layer whose dimensions are not multiples of 16 (the float8 matmul's
requirement).

The speedup exists only on NVIDIA GPUs with float8 tensor cores (compute capability
8.9+: Ada and Hopper); elsewhere `check_device` refuses it in one line rather than
run a slower emulation. torchao is in the training lock; where it is missing the
refusal says so.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from types import ModuleType

import torch
from torch import nn

from modules.validation import InvalidArgsError, Problem

RECIPES = ("tensorwise", "rowwise")
#: Float8 tensor cores: Ada (8.9) and Hopper (9.0) and later.
MIN_CAPABILITY = (8, 9)
#: The float8 matmul (``torch._scaled_mm``) needs both dimensions divisible by this.
DIM_MULTIPLE = 16
REQUIREMENT = "torchao==0.18.0"


def torchao_float8() -> ModuleType:
    """``torchao.float8``; `ImportError` with the package to install when absent."""
    # torchao logs a warning for each optional CUDA kernel library it cannot load (all
    # of them on a CPU build of torch); its float8 training needs none of them.
    logging.getLogger("torchao").setLevel(logging.ERROR)
    # torch warns once that torchao registers an Enum with its pytree (a deprecation
    # addressed to torchao's authors, not to this program's users).
    pytree = logging.getLogger("torch.utils._pytree")
    level = pytree.level
    pytree.setLevel(logging.ERROR)
    try:
        return importlib.import_module("torchao.float8")
    except ImportError as err:
        raise ImportError(f"torchao is not installed ({err}); pip install '{REQUIREMENT}'") from err
    finally:
        pytree.setLevel(level)


def unavailable(device: torch.device) -> str | None:
    """Why float8 training cannot run here (`device_problem`, or torchao missing), or None."""
    problem = device_problem(device)
    if problem is not None:
        return problem
    try:
        torchao_float8()
    except ImportError as err:
        return str(err)
    return None


def device_problem(device: torch.device) -> str | None:
    """Why float8 training cannot run (fast) on ``device``, or None."""
    if device.type != "cuda":
        return (
            f"float8 training needs an NVIDIA GPU with float8 tensor cores (compute "
            f"capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}+: H100, H200, L4, L40S); "
            f"this is a {device.type}: use --float8 off"
        )
    if not torch.cuda.is_available():
        return f"float8 training needs CUDA, and this torch ({torch.__version__}) has none"
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        return (
            f"float8 training needs compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}+ "
            f"(H100, H200, L4, L40S); {name} is {capability[0]}.{capability[1]}: "
            "use --float8 off"
        )
    return None


def check_device(recipe: str, device: torch.device) -> None:
    """`InvalidArgsError` (one line naming ``--float8``) when ``recipe`` is not off and
    this device or this environment cannot run it."""
    if recipe == "off":
        return
    problem = unavailable(device)
    if problem is not None:
        raise InvalidArgsError([Problem("float8", recipe, problem)])


def converts(module: nn.Module, fqn: str) -> bool:
    """Whether `convert` gives the linear layer ``module`` (at ``fqn``) float8 matmuls."""
    if not isinstance(module, nn.Linear):
        return False
    if not fqn.startswith("blocks."):  # the LM head
        return False
    return module.in_features % DIM_MULTIPLE == 0 and module.out_features % DIM_MULTIPLE == 0


def convert(model: nn.Module, recipe: str, *, emulate: bool = False) -> int:
    """Swap ``model``'s eligible linear layers (`converts`) for torchao's
    ``Float8Linear`` with the ``recipe``'s scaling, in place; returns how many.

    Args:
        model: the `GPT` (before compiling and wrapping).
        recipe: ``tensorwise`` or ``rowwise``.
        emulate: run the float8 casts with fp32 matmuls (torchao's emulation, for
            tests on hardware without float8; no speedup).
    """
    if recipe not in RECIPES:
        raise ValueError(f"float8 recipe {recipe!r}: one of {', '.join(RECIPES)}")
    float8 = torchao_float8()
    config = float8.Float8LinearConfig.from_recipe_name(recipe)
    if emulate:
        config = dataclasses.replace(config, emulate=True)
    before = sum(1 for _ in model.modules() if _is_float8(_))
    float8.convert_to_float8_training(model, config=config, module_filter_fn=converts)
    return sum(1 for _ in model.modules() if _is_float8(_)) - before


def _is_float8(module: nn.Module) -> bool:
    return type(module).__name__ == "Float8Linear"


def apply(model: nn.Module, recipe: str, device: torch.device) -> int:
    """`check_device`, then `convert`: what building a model with ``--float8`` does."""
    if recipe == "off":
        return 0
    check_device(recipe, device)
    return convert(model, recipe)
