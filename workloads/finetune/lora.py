"""``make finetune BASE=<HF model dir> DATA=<dataset> OUT=<dir>``: LoRA fine-tuning with PEFT
on the CPU, writing the adapter and a merged model; the base folder is only read.

1. The base is loaded with ``AutoModelForCausalLM`` / ``AutoTokenizer`` (a folder: a
   `make export-hf` export, or any causal LM saved with ``save_pretrained``; nothing is
   fetched from a hub). PEFT wraps it with a LoRA adapter (``LoraConfig``, by default
   rank 8 on every linear projection: ``target_modules="all-linear"``, which also finds
   GPT-2's ``Conv1D``); only the adapter's weights train.
2. DATA is either a JSONL file of ``{"prompt": ..., "response": ...}`` objects (the loss
   is on the response's tokens only, then the tokenizer's EOS where it has one), or a
   dataset directory of `make data` (its ``manifest.json`` verified, its ``train_*.bin``
   byte-level token shards read as training reads them, `workloads.data.shards`), which
   needs a base whose tokenizer gives the byte ids (a `make export-hf` export does).
3. A fixed number of AdamW steps (``--steps``), seeded; the loss is printed every
   ``--log-every`` steps.
4. Written into a hidden sibling of OUT and swapped into place whole
   (`workloads.output_lock`, as `make export` writes): ``adapter/`` (PEFT's
   ``adapter_config.json`` and ``adapter_model.safetensors``, loadable with
   ``PeftModel.from_pretrained(base, OUT/adapter)``), ``merged/`` (the adapter merged into
   the base weights: a plain model folder ``AutoModelForCausalLM`` loads, with the base's
   tokenizer files copied byte for byte) and ``finetune.json`` (base and data digests,
   settings, losses, parity). Before the swap the merged folder is loaded back: its
   logits must equal the adapted model's within ``--logit-atol``.

OUT must be absent, empty or an earlier fine-tuning output (only what this command
writes), and never inside, equal to or containing BASE or DATA. Exit status: 0 written,
2 bad base / data / output / settings (one line), 130 interrupted (the output unchanged).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias

from workloads import output_lock
from workloads.data.manifest import ManifestError, file_sha256, verify_dataset
from workloads.data.shard_format import ShardError, shard_files
from workloads.data.shards import ShardLoader

EXIT_OK = 0
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
RECORD_FILE = "finetune.json"
ADAPTER_DIR = "adapter"
MERGED_DIR = "merged"
#: What a fine-tuning output holds at its top level (an earlier one has these only).
OUTPUT_ENTRIES = frozenset({RECORD_FILE, ADAPTER_DIR, MERGED_DIR})
#: The tokenizer's files in a model folder (transformers' and sentencepiece's names):
#: the merged model gets the base's, byte for byte. Nothing else of the base is copied
#: (its weights, config and any record of where it came from describe the base).
_TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model",
    "spiece.model", "chat_template.json", "chat_template.jinja",
)  # fmt: skip
#: Merged vs adapted logits: the same weights added before instead of after the matmul.
DEFAULT_LOGIT_ATOL = 1e-4
IGNORE = -100
MAX_STEPS = 100_000
#: A JSONL line shown in an error is cut to this many characters.
_SHOWN_CHARS = 60
#: Probe text for "does BASE's tokenizer give byte ids" (a shard dataset needs it).
_BYTE_PROBE = "The falcon, الصقر 🦅"


class FinetuneError(Exception):
    """A base, dataset, output or setting that cannot be used; the message says what to do."""


@dataclass(frozen=True)
class Options:
    """One fine-tuning run's settings.

    Args:
        steps: optimizer steps.
        batch_size: sequences per step.
        seq_len: longest sequence (capped by the base's context).
        learning_rate: AdamW learning rate of the adapter's weights.
        rank: LoRA rank ``r``.
        alpha: LoRA scaling numerator (the update is scaled by ``alpha / rank``).
        dropout: dropout on the adapter's input.
        target_modules: PEFT's ``target_modules`` (``all-linear``, or comma-separated names).
        seed: seeds the adapter's init and the order of the examples.
        log_every: print the loss every this many steps.
        logit_atol: allowed |merged - adapted| logit difference.
    """

    steps: int = 30
    batch_size: int = 4
    seq_len: int = 128
    learning_rate: float = 1e-3
    rank: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: str = "all-linear"
    seed: int = 0
    log_every: int = 10
    logit_atol: float = DEFAULT_LOGIT_ATOL

    def problems(self) -> list[str]:
        """Each setting out of range, as ``--name: what it must be``."""
        checks = [
            (1 <= self.steps <= MAX_STEPS, f"--steps: 1 to {MAX_STEPS}, got {self.steps}"),
            (self.batch_size >= 1, f"--batch-size: at least 1, got {self.batch_size}"),
            (self.seq_len >= 2, f"--seq-len: at least 2, got {self.seq_len}"),
            (
                math.isfinite(self.learning_rate) and self.learning_rate > 0,
                f"--learning-rate: a positive number, got {self.learning_rate}",
            ),
            (self.rank >= 1, f"--rank: at least 1, got {self.rank}"),
            (self.alpha >= 1, f"--alpha: at least 1, got {self.alpha}"),
            (0 <= self.dropout < 1, f"--dropout: in [0, 1), got {self.dropout}"),
            (self.log_every >= 1, f"--log-every: at least 1, got {self.log_every}"),
            (bool(self.target_modules.strip()), "--target-modules: not empty"),
        ]
        return [message for ok, message in checks if not ok]


@dataclass(frozen=True)
class Result:
    """What a run did (also ``finetune.json``)."""

    base: dict[str, str]
    data: dict[str, str]
    options: dict[str, Any]
    trainable_parameters: int
    total_parameters: int
    losses: list[tuple[int, float]]
    merged_max_abs_logit_diff: float
    max_abs_logit_change_from_base: float
    seconds: float
    versions: dict[str, str]
    #: "lora" (adapter/ and merged/) or "full" (every parameter; merged/ only).
    mode: str = "lora"
    finished_at: str = field(
        default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


# --- inputs -----------------------------------------------------------------------------


def folder_digest(folder: Path) -> str:
    """SHA-256 over every file of ``folder`` (relative path and content digest)."""
    lines = [
        f"{path.relative_to(folder)} {file_sha256(path)}"
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    ]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _quiet_libraries() -> None:
    """transformers and PEFT narrate loading and saving; this command prints its own lines."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a base is a folder; nothing is fetched
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def check_base(base: Path) -> None:
    """`FinetuneError` unless ``base`` is a folder with a ``config.json``."""
    if not base.is_dir():
        what = "no such directory" if not base.exists() else "not a directory"
        raise FinetuneError(f"BASE {base}: {what}; give a Hugging Face model folder")
    if not (base / "config.json").is_file():
        raise FinetuneError(
            f"BASE {base} has no config.json: it is not a Hugging Face model folder "
            "(`make export-hf` writes one)"
        )


def load_base(base: Path) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of the base folder, fp32, on the CPU."""
    check_base(base)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(base))
        model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    except (OSError, ValueError, KeyError) as err:
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise FinetuneError(f"BASE {base} cannot be loaded as a causal LM ({first})") from err
    return model, tokenizer


@dataclass(frozen=True)
class Example:
    """One training sequence: token ids and, per id, whether it is trained on."""

    ids: list[int]
    trained: list[bool]


def read_jsonl(path: Path, tokenizer: Any, seq_len: int) -> list[Example]:
    """The prompt/response pairs of ``path``: prompt tokens (with the tokenizer's own
    special tokens) not trained on, response tokens and EOS trained on, cut at ``seq_len``
    tokens. `FinetuneError` naming the line of a bad entry."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise FinetuneError(f"DATA {path}: not UTF-8 text (byte {err.start})") from err
    except OSError as err:
        raise FinetuneError(f"DATA {path}: cannot read ({err.strerror})") from err
    eos = tokenizer.eos_token_id
    examples = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"DATA {path}, line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as err:
            raise FinetuneError(f"{where}: not JSON ({err.msg}): {line[:_SHOWN_CHARS]!r}") from err
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(k), str) for k in ("prompt", "response")
        ):
            raise FinetuneError(
                f'{where}: expected {{"prompt": "...", "response": "..."}} with text values, '
                f"got {line[:_SHOWN_CHARS]!r}"
            )
        if not entry["response"]:
            raise FinetuneError(f"{where}: the response is empty; nothing to learn from it")
        prompt = tokenizer(entry["prompt"])["input_ids"]
        response = tokenizer(entry["response"], add_special_tokens=False)["input_ids"]
        response += [eos] if eos is not None else []
        ids = (list(prompt) + list(response))[:seq_len]
        trained = ([False] * len(prompt) + [True] * len(response))[:seq_len]
        if len(ids) < 2 or not any(trained[1:]):
            raise FinetuneError(
                f"{where}: the prompt fills the {seq_len}-token sequence and leaves no response "
                "token to train on; shorten it or raise --seq-len"
            )
        examples.append(Example(ids, trained))
    if not examples:
        raise FinetuneError(f"DATA {path} holds no prompt/response pairs")
    return examples


def jsonl_batches(
    examples: list[Example], batch_size: int, pad_id: int, seed: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``(inputs, targets, attention mask)`` batches, endlessly, over a seeded shuffle of
    ``examples`` (reshuffled every pass); targets are ``-100`` where nothing is trained."""
    order = list(range(len(examples)))
    rng = random.Random(seed)
    while True:
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            chosen = [examples[i] for i in order[start : start + batch_size]]
            width = max(len(e.ids) for e in chosen) - 1
            inputs = torch.full((len(chosen), width), pad_id, dtype=torch.long)
            targets = torch.full((len(chosen), width), IGNORE, dtype=torch.long)
            mask = torch.zeros((len(chosen), width), dtype=torch.long)
            for row, example in enumerate(chosen):
                n = len(example.ids) - 1
                inputs[row, :n] = torch.tensor(example.ids[:-1])
                mask[row, :n] = 1
                labels = [
                    t if keep else IGNORE
                    for t, keep in zip(example.ids, example.trained, strict=True)
                ]
                targets[row, :n] = torch.tensor(labels[1:])
            yield inputs, targets, mask


def gives_byte_ids(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` encodes text as the trainer's byte tokenizer does."""
    ids = tokenizer(_BYTE_PROBE, add_special_tokens=False)["input_ids"]
    return list(ids) == list(_BYTE_PROBE.encode("utf-8"))


def shard_batches(
    data: Path, tokenizer: Any, vocab_size: int, options: Options
) -> tuple[Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], dict[str, str]]:
    """Batches of a `make data` dataset directory (byte-level token shards), and how the
    record names the dataset."""
    try:
        ref = verify_dataset(data)
        files = shard_files(data, "train")
        if not files:
            raise FinetuneError(
                f"DATA {data} has no train_*.bin shards; give a `make data` dataset "
                "directory or a JSONL file of prompt/response pairs"
            )
        loader = ShardLoader(
            files,
            batch=options.batch_size,
            seq_len=options.seq_len,
            rank=0,
            world_size=1,
            vocab_size=vocab_size,
        )
    except (ManifestError, ShardError) as err:
        raise FinetuneError(f"DATA {data}: {err}") from err
    if not gives_byte_ids(tokenizer):
        raise FinetuneError(
            f"DATA {data} holds byte-level token shards, and BASE's tokenizer does not give "
            "byte ids (one per UTF-8 byte); fine-tune a `make export-hf` model on it, or give "
            "this base a JSONL file of prompt/response pairs"
        )

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        while True:
            inputs, targets = loader.next_batch()
            yield inputs, targets, torch.ones_like(inputs)

    described = {
        "path": str(data.resolve()),
        "kind": "shards",
        "digest": ref.digest if ref is not None else "",
        "shards": str(len(files)),
    }
    return batches(), described


# --- output -----------------------------------------------------------------------------


def check_output(out: Path, base: Path, data: Path) -> None:
    """`FinetuneError` (nothing changed) unless ``out`` is absent, empty or an earlier
    fine-tuning output, and neither inside, equal to nor containing BASE or DATA."""
    target = out.resolve()
    for name, path in (("BASE", base), ("DATA", data)):
        source = path.resolve()
        if target == source or source in target.parents or target in source.parents:
            raise FinetuneError(
                f"OUT {out} is, is inside or contains {name} {path}; fine-tuning never writes "
                f"there. Choose an OUT= outside it."
            )
    if out.is_symlink():
        raise FinetuneError(f"OUT {out} is a symbolic link; give another OUT=")
    if not out.exists():
        return
    if not out.is_dir():
        raise FinetuneError(f"OUT {out} is a file, not a directory; choose another OUT=")
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return
    foreign = [e for e in entries if e not in OUTPUT_ENTRIES]
    if not foreign and (out / RECORD_FILE).is_file():
        try:
            json.loads((out / RECORD_FILE).read_text(encoding="utf-8"))
            return
        except (OSError, ValueError):
            pass
    shown = ", ".join((foreign or entries)[:6])
    raise FinetuneError(
        f"OUT {out} is not an earlier fine-tuning output (it holds {shown}); refusing to "
        "replace it, nothing in it was changed. Give an OUT= that is absent or empty."
    )


def _copy_tokenizer_files(base: Path, merged: Path) -> None:
    """The base's tokenizer files (`_TOKENIZER_FILES`), byte for byte."""
    for name in _TOKENIZER_FILES:
        if (base / name).is_file():
            shutil.copyfile(base / name, merged / name)


# --- training ---------------------------------------------------------------------------


def _context_length(model: Any) -> int | None:
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _loss(model: Any, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    inputs, targets, mask = batch
    logits = model(input_ids=inputs, attention_mask=mask).logits
    loss: torch.Tensor = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=IGNORE
    )
    return loss


def _lora_config(model: Any, options: Options) -> Any:
    from peft import LoraConfig  # noqa: PLC0415
    from transformers.pytorch_utils import Conv1D  # noqa: PLC0415

    targets: str | list[str] = options.target_modules
    if targets != "all-linear":
        targets = [t.strip() for t in options.target_modules.split(",") if t.strip()]
    return LoraConfig(
        r=options.rank,
        lora_alpha=options.alpha,
        lora_dropout=options.dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
        # GPT-2's projections are Conv1D, whose weight is (in, out).
        fan_in_fan_out=any(isinstance(m, Conv1D) for m in model.modules()),
    )


def _versions() -> dict[str, str]:
    from importlib.metadata import version  # noqa: PLC0415

    names = ("torch", "transformers", "peft", "safetensors", "tokenizers")
    return {name: version(name) for name in names}


def check_and_lock(base: Path, data: Path, out: Path, options: Options) -> output_lock.Lock:
    """The settings, BASE, DATA and OUT checked (before any work: a refused OUT costs
    nothing), then OUT's lock taken; the caller releases it.

    Raises:
        FinetuneError: what to fix; nothing at ``out`` changed.
    """
    problems = options.problems()
    if problems:
        raise FinetuneError("; ".join(problems))
    check_base(base)
    if not data.exists():
        raise FinetuneError(
            f"DATA {data}: no such file or directory; give a `make data` dataset directory or a "
            "JSONL file of prompt/response pairs"
        )
    check_output(out, base, data)  # before any work: a refused OUT costs nothing
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        lock = output_lock.acquire(
            out, f"OUT {out}", lambda line: print(f"finetune: {line}", file=sys.stderr)
        )
    except output_lock.OutputLockError as err:
        raise FinetuneError(str(err)) from err
    except OSError as err:
        raise FinetuneError(f"cannot write to {out} ({err.strerror}); choose another OUT=") from err
    return lock


def finetune(base: Path, data: Path, out: Path, options: Options) -> Result:
    """Fine-tune ``base`` on ``data`` and write ``out`` (see the module docstring).

    Raises:
        FinetuneError: a bad base, dataset, output or setting; nothing at ``out`` changed.
    """
    lock = check_and_lock(base, data, out, options)
    try:
        check_output(out, base, data)
        return _finetune(base, data, out, options)
    finally:
        lock.release()


Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def training_batches(
    data: Path, model: Any, tokenizer: Any, options: Options
) -> tuple[Iterator[Batch], dict[str, str], int]:
    """``(batches, how the record names DATA, sequence length)``: ``--seq-len`` capped by
    the base's context, DATA a dataset directory or a JSONL file."""
    context = _context_length(model)
    seq_len = min(options.seq_len, context) if context else options.seq_len
    vocab = int(model.get_output_embeddings().weight.shape[0])
    if data.is_dir():
        run_options = Options(**{**asdict(options), "seq_len": seq_len})
        batches, described = shard_batches(data, tokenizer, vocab, run_options)
    else:
        examples = read_jsonl(data, tokenizer, seq_len)
        pad = tokenizer.pad_token_id
        pad = pad if pad is not None else (tokenizer.eos_token_id or 0)
        batches = jsonl_batches(examples, options.batch_size, int(pad), options.seed)
        described = {
            "path": str(data.resolve()),
            "kind": "jsonl",
            "digest": file_sha256(data),
            "examples": str(len(examples)),
        }
    return batches, described, seq_len


def _finetune(base: Path, data: Path, out: Path, options: Options) -> Result:
    started = time.monotonic()
    _quiet_libraries()
    base_digest = folder_digest(base)
    model, tokenizer = load_base(base)
    batches, described, seq_len = training_batches(data, model, tokenizer, options)
    from peft import get_peft_model  # noqa: PLC0415

    torch.manual_seed(options.seed)
    probe = next(batches)  # also the first training batch
    with torch.no_grad():
        base_logits = model.eval()(input_ids=probe[0], attention_mask=probe[2]).logits
    try:
        peft_model = get_peft_model(model, _lora_config(model, options))
    except ValueError as err:
        raise FinetuneError(f"--target-modules {options.target_modules!r}: {err}") from err
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in peft_model.parameters())
    optimizer = torch.optim.AdamW(
        [p for p in peft_model.parameters() if p.requires_grad], lr=options.learning_rate
    )
    peft_model.train()
    losses: list[tuple[int, float]] = []
    batch = probe
    for step in range(1, options.steps + 1):
        loss = _loss(peft_model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if not math.isfinite(loss.item()):
            raise FinetuneError(
                f"the loss is {loss.item()} at step {step}; lower --learning-rate and run again"
            )
        if step == 1 or step % options.log_every == 0 or step == options.steps:
            losses.append((step, round(loss.item(), 6)))
            print(f"finetune: step {step}/{options.steps} loss {loss.item():.4f}", flush=True)
        batch = next(batches)
    peft_model.eval()
    with torch.no_grad():
        adapted = peft_model(input_ids=probe[0], attention_mask=probe[2]).logits
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        peft_model.save_pretrained(str(tmp / ADAPTER_DIR))
        merged = peft_model.merge_and_unload()
        merged.save_pretrained(str(tmp / MERGED_DIR))
        _copy_tokenizer_files(base, tmp / MERGED_DIR)
        diff = _check_merged(tmp / MERGED_DIR, probe, adapted, options.logit_atol)
        result = Result(
            base={
                "path": str(base.resolve()),
                "digest": base_digest,
                "model_type": str(model.config.model_type),
            },
            data=described,
            options=asdict(options) | {"seq_len": seq_len},
            trainable_parameters=int(trainable),
            total_parameters=int(total),
            losses=losses,
            merged_max_abs_logit_diff=diff,
            max_abs_logit_change_from_base=float((adapted - base_logits).abs().max()),
            seconds=round(time.monotonic() - started, 2),
            versions=_versions(),
        )
        (tmp / RECORD_FILE).write_text(result.to_json(), encoding="utf-8")
        if folder_digest(base) != base_digest:
            raise FinetuneError(f"BASE {base} changed while fine-tuning; nothing was written")
        check_output(out, base, data)
        output_lock.swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result


def _check_merged(
    merged: Path,
    probe: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    adapted: torch.Tensor,
    atol: float,
) -> float:
    """The merged folder, loaded as a user loads it, against the adapted model's logits."""
    from transformers import AutoModelForCausalLM  # noqa: PLC0415

    loaded = AutoModelForCausalLM.from_pretrained(str(merged), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = loaded(input_ids=probe[0], attention_mask=probe[2]).logits
    mask = probe[2].bool()  # padded positions' logits are not compared
    diff = float((logits - adapted)[mask].abs().max())
    if not diff <= atol:
        raise FinetuneError(
            f"the merged model's logits differ from the adapted model's by up to {diff:.3g} "
            f"(allowed {atol:g}); nothing was written"
        )
    return diff


# --- command line -------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    defaults = Options()
    parser = argparse.ArgumentParser(
        prog="python -m workloads.finetune",
        description="LoRA fine-tuning (PEFT) of a Hugging Face causal LM: adapter + merged model.",
    )
    parser.add_argument(
        "base", type=Path, nargs="?", help="the base model's folder (never changed)"
    )
    # The same, as a flag: how a cluster job names it, where the platform's model
    # residency rule (policies/rules/llm.py) reads a model after a model flag.
    parser.add_argument("--base-model", type=Path, help="the base model's folder, as a flag")
    parser.add_argument(
        "--data",
        type=Path,
        required=True,
        help="a `make data` dataset directory or a JSONL file of prompt/response pairs",
    )
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len)
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    parser.add_argument("--rank", type=int, default=defaults.rank, help="LoRA rank r")
    parser.add_argument("--alpha", type=int, default=defaults.alpha, help="LoRA alpha")
    parser.add_argument("--dropout", type=float, default=defaults.dropout)
    parser.add_argument("--target-modules", default=defaults.target_modules)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--log-every", type=int, default=defaults.log_every)
    parser.add_argument("--logit-atol", type=float, default=defaults.logit_atol)
    parser.add_argument(
        "--full",
        action="store_true",
        help="a full fine-tune (every parameter, FSDP2 over gloo; merged/ only, no adapter/)",
    )
    parser.add_argument(
        "--nproc", type=int, default=1, help="with --full: torchrun worker processes"
    )
    return parser
