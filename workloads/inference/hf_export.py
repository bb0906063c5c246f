"""``make export-hf CKPT=<dir> OUT=<dir>``: a DCP checkpoint as a Hugging Face model folder
that ``AutoModelForCausalLM`` / ``AutoTokenizer`` load with no custom code, and that vLLM
serves.

The trainer's model (`workloads.training.model.GPT`) is GPT-2's architecture: learned
positions, pre-norm LayerNorm (eps 1e-5), GELU (tanh), fused q/k/v projection, an LM head
tied to the token embedding. It is written as a ``GPT2LMHeadModel``:

- ``config.json``: ``model_type`` ``gpt2``, the run's layers, heads, width and context
  (``n_positions`` = ``block_size``), ``vocab_size`` = the model's embedding rows,
  ``activation_function`` ``gelu_pytorch_tanh`` (exactly ``nn.GELU(approximate="tanh")``),
  dropout 0, no BOS/EOS/pad id (the trainer's byte tokenizer has no special tokens);
- ``model.safetensors``: the weights, fp32. Hugging Face's GPT-2 keeps its projections
  in ``Conv1D`` modules whose weight is ``(in, out)``: ``nn.Linear``'s ``(out, in)``
  transposed. The tied LM head is not stored (``tie_word_embeddings``);
- ``tokenizer.json`` + ``tokenizer_config.json``: the trainer's byte tokenizer
  (`workloads.data.byte_tokenizer`: one token per UTF-8 byte, id = byte value) as a
  `tokenizers` byte-level BPE with no merges, so every byte is its own token and its id
  is the byte's value; no special tokens, no BOS prepended, no clean-up of spaces on
  decode: encode(text) is exactly ``list(text.encode("utf-8"))`` and decode replaces
  invalid UTF-8 with U+FFFD, as the trainer's ``decode_bytes`` does. tokenizer_config.json
  carries the chat template (`CHAT_TEMPLATE`) that vLLM's ``/v1/chat/completions`` uses;
- ``hf_export.json``: where it came from (checkpoint, step, run id, git revision), the
  parity figures and the package versions; it also marks the folder as an export this
  command may replace.

Before anything is put in place the folder is loaded back with ``AutoModelForCausalLM``
and ``AutoTokenizer``: its logits must equal the trainer model's within ``--logit-atol``
on held-out tokens, and its tokenizer must give the byte tokenizer's ids for a sample of
English, Arabic and emoji text. The output is handled as ``make export`` handles its own
(`workloads.inference.export`): one writer at a time (the lock ``<OUT>.lock``,
`workloads.output_lock`), written into a hidden sibling and swapped into place whole, and
``--out`` must be absent, empty or an earlier Hugging Face export (only the files this
command writes), never inside, equal to or containing the checkpoint directory.

Exit status: 0 written, 2 bad checkpoint / config / output / failed parity, 130
interrupted (Ctrl-C; the output unchanged).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from modules.validation import InvalidArgsError
from workloads import output_lock
from workloads.data.byte_tokenizer import BYTE_VOCAB_SIZE
from workloads.data.shards import ShardError
from workloads.inference.errors import ExportError
from workloads.inference.export import (
    checkpoint_root,
    config_for,
    export_source,
    heldout_tokens,
)
from workloads.inference.source import load_model, resolve_checkpoint
from workloads.inference.tokenizer import BYTE_TOKENIZER, ByteTokenizer
from workloads.training.config import TrainConfig, add_override_arguments, describe_problems
from workloads.training.model import GPT

EXIT_OK = 0
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
DEFAULT_EXPORT_ROOT = Path("build/export-hf")
#: The same fp32 math in another module layout; measured differences are 0 to ~1e-6.
DEFAULT_LOGIT_ATOL = 1e-4
HELDOUT_SEQUENCES = 4
RECORD_FILE = "hf_export.json"
CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
#: Every file an export writes (an earlier export holds these and nothing else).
EXPORT_FILES = frozenset(
    {
        RECORD_FILE,
        CONFIG_FILE,
        GENERATION_CONFIG_FILE,
        WEIGHTS_FILE,
        TOKENIZER_FILE,
        TOKENIZER_CONFIG_FILE,
    }
)
#: The chat template: each message as ``Role: content`` on its own line, then
#: ``Assistant:`` for the reply. Plain text, no special tokens: the model was trained on
#: bytes of text and knows no chat markup, so the template only frames the conversation
#: as a transcript it may continue. Nothing ends a reply but ``max_tokens`` or a stop
#: string (``"\\nUser:"`` is a good one): the byte vocabulary has no end-of-text token.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | capitalize }}: "
    "{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
#: Text whose ids the written tokenizer must give exactly as the byte tokenizer does.
SAMPLE_TEXT = (
    "The falcon flies over Abu Dhabi , at 06:00 .\n"
    "مرحبا بالعالم، الإمارات العربية المتحدة\n"
    "emoji 🦅🇦🇪 and  two  spaces\t<|endoftext|>"
)
_SHOWN_ENTRIES = 6


@dataclass(frozen=True)
class HfExport:
    """What an export wrote and checked (also ``hf_export.json``).

    Args:
        format: ``"transformers"``, the folder's format.
        architecture: the Hugging Face class the folder loads as.
        tokenizer: the trainer's tokenizer the folder's tokenizer reproduces.
        source: checkpoint, step, preset, run id, git revision, export time.
        max_abs_logit_diff: largest |Hugging Face - trainer| logit on the held-out tokens.
        logit_atol: the bound it had to stay within.
        heldout_tokens: tokens the logits were compared on.
        versions: torch, transformers, tokenizers, safetensors.
    """

    format: str
    architecture: str
    tokenizer: str
    source: dict[str, str]
    max_abs_logit_diff: float
    logit_atol: float
    heldout_tokens: int
    versions: dict[str, str]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def read_record(folder: Path) -> HfExport:
    """The ``hf_export.json`` of an export folder; `ExportError` when it has none."""
    try:
        body = json.loads((folder / RECORD_FILE).read_text(encoding="utf-8"))
        return HfExport(**body)
    except (OSError, ValueError, TypeError) as err:
        raise ExportError(
            f"{folder} is not a Hugging Face export (no readable {RECORD_FILE}); "
            "make one with `make export-hf`"
        ) from err


def quiet_transformers() -> None:
    """transformers narrates loading and saving (progress bars, notes about generation
    settings); the export prints its own two lines."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here is fetched from a hub
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def byte_unicode_map() -> dict[int, str]:
    """GPT-2's printable stand-in character for each byte (``bytes_to_unicode`` in the
    GPT-2 release), which `tokenizers`' ``ByteLevel`` pre-tokenizer maps bytes to."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for byte in range(256):
        if byte not in chars:
            chars[byte] = chr(256 + extra)
            extra += 1
    return chars


def byte_tokenizer(context_length: int) -> Any:
    """The trainer's byte tokenizer as a ``PreTrainedTokenizerFast``: id = byte value."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: PLC0415
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    vocab = {char: byte for byte, char in byte_unicode_map().items()}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False, byte_fallback=False))
    # No regex split and no prefix space: bytes in, one token per byte out.
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        model_max_length=context_length,
        clean_up_tokenization_spaces=False,
    )


def tokenizer_config(context_length: int) -> dict[str, Any]:
    """``tokenizer_config.json``, written by hand so that it reads the same in every
    transformers release that loads it (5.x writes its own class name, which 4.x does
    not know, and the chat template to a file of its own that older releases ignore)."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": context_length,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": None,
        "eos_token": None,
        "pad_token": None,
        "unk_token": None,
        "added_tokens_decoder": {},
        "chat_template": CHAT_TEMPLATE,
    }


def gpt2_config(model: GPT) -> Any:
    """The ``GPT2Config`` of the trainer's ``model``."""
    from transformers import GPT2Config  # noqa: PLC0415

    shape = model.config
    return GPT2Config(
        vocab_size=model.vocab_rows,
        n_positions=shape.block_size,
        n_embd=shape.n_embd,
        n_layer=shape.n_layer,
        n_head=shape.n_head,
        n_inner=shape.mlp_hidden,  # 4 x n_embd unless make prune narrowed it
        activation_function="gelu_pytorch_tanh",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        scale_attn_weights=True,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        architectures=["GPT2LMHeadModel"],
    )


#: The trainer's projections: ``nn.Linear`` there, ``Conv1D`` (weight transposed) in HF.
_PROJECTIONS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def gpt2_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """The trainer model's weights under ``GPT2LMHeadModel``'s names (no tied head)."""
    state = {k: v.detach().to(torch.float32) for k, v in model.state_dict().items()}
    out = {
        "transformer.wte.weight": state["wte.weight"],
        "transformer.wpe.weight": state["wpe.weight"],
        "transformer.ln_f.weight": state["ln_f.weight"],
        "transformer.ln_f.bias": state["ln_f.bias"],
    }
    for i in range(model.config.n_layer):
        src, dst = f"blocks.{i}.", f"transformer.h.{i}."
        for norm in ("ln_1", "ln_2"):
            for part in ("weight", "bias"):
                out[f"{dst}{norm}.{part}"] = state[f"{src}{norm}.{part}"]
        for proj in _PROJECTIONS:
            out[f"{dst}{proj}.weight"] = state[f"{src}{proj}.weight"].t().contiguous()
            out[f"{dst}{proj}.bias"] = state[f"{src}{proj}.bias"]
    return out


def to_hf(model: GPT) -> Any:
    """A ``GPT2LMHeadModel`` with ``model``'s weights, in eval mode."""
    from transformers import GPT2LMHeadModel  # noqa: PLC0415

    hf = GPT2LMHeadModel(gpt2_config(model))
    missing, unexpected = hf.load_state_dict(gpt2_state_dict(model), strict=False)
    # The LM head is tied to wte (not stored); a non-persistent attention buffer may be
    # reported missing on some releases. Anything else is a mapping error.
    left = [k for k in missing if k != "lm_head.weight" and not k.endswith(".attn.bias")]
    if left or unexpected:
        raise ExportError(f"weight mapping to GPT2LMHeadModel failed: {left or unexpected}")
    hf.tie_weights()
    return hf.eval()


def _is_export(path: Path) -> bool:
    try:
        read_record(path)
    except ExportError:
        return False
    return True


def check_output(out: Path, checkpoint: Path) -> None:
    """`ExportError` (naming the directory, nothing changed) unless ``out`` may receive
    an export of the checkpoint directory ``checkpoint``: absent, empty or an earlier
    Hugging Face export, and neither inside, equal to nor containing ``checkpoint``."""
    target, root = out.resolve(), checkpoint.resolve()
    if target == root or root in target.parents or target in root.parents:
        raise ExportError(
            f"OUT {out} is, is inside or contains the checkpoint directory {checkpoint}; an "
            f"export never writes into a checkpoint. Choose an OUT= outside it (the default "
            f"is {DEFAULT_EXPORT_ROOT}/<checkpoint dir>-step<N>)."
        )
    if out.is_symlink():
        raise ExportError(
            f"OUT {out} is a symbolic link; give the directory it points to, or another OUT="
        )
    if not out.exists():
        return
    if not out.is_dir():
        raise ExportError(f"OUT {out} is a file, not a directory; choose another OUT=")
    entries = sorted(out.iterdir())
    foreign = [
        p.name + ("/" if p.is_dir() else "")
        for p in entries
        if p.name not in EXPORT_FILES or p.is_symlink() or not p.is_file()
    ]
    if not entries or (not foreign and _is_export(out)):
        return
    why = "files export-hf does not write" if foreign else f"no readable {RECORD_FILE}"
    shown = foreign or [p.name for p in entries]
    listed = ", ".join(shown[:_SHOWN_ENTRIES])
    more = f" (and {len(shown) - _SHOWN_ENTRIES} more)" if len(shown) > _SHOWN_ENTRIES else ""
    raise ExportError(
        f"OUT {out} is not an earlier Hugging Face export ({why}: {listed}{more}); refusing "
        "to replace it, nothing in it was changed. Give an OUT= that is absent, empty or an "
        "earlier export, or move the folder away yourself."
    )


def _write_folder(model: GPT, folder: Path) -> None:
    """The model, its generation settings and the tokenizer, into ``folder``."""
    context = model.config.block_size
    hf = to_hf(model)
    # generate() stops at the context (its default, 20 tokens in all, would cut replies).
    hf.generation_config.max_length = context
    hf.save_pretrained(str(folder))
    tokenizer = byte_tokenizer(context)
    tokenizer.backend_tokenizer.save(str(folder / TOKENIZER_FILE))
    config = json.dumps(tokenizer_config(context), indent=2, ensure_ascii=False) + "\n"
    (folder / TOKENIZER_CONFIG_FILE).write_text(config, encoding="utf-8")


def _readable_as_umask_allows(folder: Path) -> None:
    """The modes a plain ``mkdir``/``open`` would have given (``mkdtemp`` makes the folder
    0700 and safetensors its file 0600): a model server running as another user of the
    group, as in the serving image, reads the folder it is pointed at."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def check_folder(folder: Path, model: GPT, windows: torch.Tensor, atol: float) -> float:
    """Load ``folder`` as a user would and compare it with the trainer's ``model``: the
    largest |logit difference| on ``windows`` (token ids), after checking it is within
    ``atol`` and that the tokenizer gives the byte tokenizer's ids. `ExportError` if not."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    expected = ByteTokenizer().encode(SAMPLE_TEXT)
    got = tokenizer(SAMPLE_TEXT)["input_ids"]
    if got != expected or tokenizer.decode(expected) != SAMPLE_TEXT:
        raise ExportError(
            "the written tokenizer does not reproduce the byte tokenizer's ids on the "
            "sample text; nothing was written"
        )
    loaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        reference = model.logits(windows)
        logits = loaded(input_ids=windows).logits
    if logits.shape != reference.shape:
        raise ExportError(
            f"the exported model's logits are {tuple(logits.shape)}, the trainer's "
            f"{tuple(reference.shape)}; nothing was written"
        )
    diff = float((logits - reference).abs().max())
    if not diff <= atol:
        raise ExportError(
            f"parity failed: the exported model's logits differ from the trainer's by up "
            f"to {diff:.3g} (allowed {atol:g}); nothing was written"
        )
    return diff


def _versions() -> dict[str, str]:
    from importlib.metadata import version  # noqa: PLC0415

    return {name: version(name) for name in ("torch", "transformers", "tokenizers", "safetensors")}


def export_hf(
    checkpoint: Path,
    out: Path,
    config: TrainConfig,
    *,
    logit_atol: float = DEFAULT_LOGIT_ATOL,
    run_id: str = "",
    revision: str = "",
) -> HfExport:
    """Export ``checkpoint`` (a step directory or a checkpoint root) to ``out``.

    Raises:
        ExportError: unreadable or mismatched checkpoint, a vocabulary that is not the
            byte tokenizer's, an output that is not absent, empty or an earlier export
            (or is inside, equal to or containing the checkpoint directory), an
            unwritable output, failed parity. Nothing at ``out`` changes then.
    """
    if config.model.vocab_size != BYTE_VOCAB_SIZE:
        raise ExportError(
            f"the run's vocabulary is {config.model.vocab_size} tokens, not the byte "
            f"tokenizer's {BYTE_VOCAB_SIZE}: export-hf ships the byte tokenizer only, and "
            "the tokenizer of externally tokenised shards is not in the checkpoint"
        )
    if config.model.attn_width != config.model.n_embd:
        # GPT2Config has no head width of its own (n_embd / n_head): a model whose heads
        # make prune removed has none it could express.
        raise ExportError(
            f"the model's {config.model.n_head} heads of {config.model.attn_head_dim} are "
            f"{config.model.attn_width} wide, not n_embd ({config.model.n_embd}): Hugging "
            "Face's GPT-2 cannot express pruned heads; export it with make export (ONNX), "
            "or prune only the MLP (HEADS=0)"
        )
    step, step_dir = resolve_checkpoint(checkpoint)
    root = checkpoint_root(step_dir)
    check_output(out, root)  # before any work: a refused OUT costs nothing
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        lock = output_lock.acquire(
            out, f"OUT {out}", lambda line: print(f"export-hf: {line}", file=sys.stderr)
        )
    except output_lock.OutputLockError as err:
        raise ExportError(str(err)) from err
    except OSError as err:
        raise ExportError(
            f"cannot write to {out} ({err.strerror}); choose a writable OUT="
        ) from err
    try:
        check_output(out, root)  # again under the lock: another export may just have ended
        model = load_model(step_dir, config)
        windows = torch.from_numpy(heldout_tokens(config, HELDOUT_SEQUENCES)[:, :-1])
        quiet_transformers()
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
        try:
            _write_folder(model, tmp)
            diff = check_folder(tmp, model, windows, logit_atol)
            record = HfExport(
                format="transformers",
                architecture="GPT2LMHeadModel",
                tokenizer=BYTE_TOKENIZER,
                source=export_source(step_dir, step, config, run_id, revision),
                max_abs_logit_diff=diff,
                logit_atol=logit_atol,
                heldout_tokens=int(windows.numel()),
                versions=_versions(),
            )
            (tmp / RECORD_FILE).write_text(record.to_json(), encoding="utf-8")
            _readable_as_umask_allows(tmp)
            check_output(out, root)
            output_lock.swap_into_place(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        lock.release()
    return record


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.inference.hf_export",
        description="Export a DCP checkpoint as a Hugging Face GPT2LMHeadModel folder.",
    )
    parser.add_argument("checkpoint", type=Path, help="a step_<N> directory or a --ckpt-dir")
    parser.add_argument(
        "--out", type=Path, help=f"output directory (default {DEFAULT_EXPORT_ROOT}/NAME)"
    )
    parser.add_argument("--run-id", default="", help="tracking run id for hf_export.json")
    parser.add_argument("--logit-atol", type=float, default=DEFAULT_LOGIT_ATOL)
    add_override_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # torch.distributed's checkpoint reader logs a warning per load without a process group.
    logging.getLogger("torch.distributed").setLevel(logging.ERROR)
    try:
        config, run_id, revision = config_for(args.checkpoint, args)
        step, step_dir = resolve_checkpoint(args.checkpoint)
        out = args.out or DEFAULT_EXPORT_ROOT / f"{checkpoint_root(step_dir).name}-step{step}"
        record = export_hf(
            step_dir,
            out,
            config,
            logit_atol=args.logit_atol,
            run_id=args.run_id or run_id,
            revision=revision,
        )
    except InvalidArgsError as err:
        print(describe_problems(err, "export-hf config"), file=sys.stderr)
        return EXIT_USER_ERROR
    except (ExportError, ShardError) as err:
        print(f"export-hf: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as err:
        print(
            f"export-hf: cannot write the export ({err.strerror or err}); nothing at the "
            "output was changed",
            file=sys.stderr,
        )
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("export-hf: interrupted; nothing at the output was changed", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(
        f"export-hf: {out}/ ({CONFIG_FILE}, {WEIGHTS_FILE}, {TOKENIZER_FILE}, "
        f"{TOKENIZER_CONFIG_FILE}, {RECORD_FILE}); GPT2LMHeadModel from step {step}"
    )
    print(
        f"export-hf: parity on {record.heldout_tokens} held-out tokens: max |logit diff| "
        f"{record.max_abs_logit_diff:.2e} (<= {record.logit_atol:g}); tokenizer: {BYTE_TOKENIZER}"
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
