"""Tiny base models built from a config, no download: a Llama-style one (RMSNorm, rotary
positions, SwiGLU, grouped-query attention) and a Falcon-style one (parallel attention
and MLP, multi-query attention, ALiBi off), each with a byte-level tokenizer (id = byte
value, as `make export-hf` writes it, plus ``</s>`` as EOS), saved with
``save_pretrained`` as any Hugging Face folder is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    FalconConfig,
    FalconForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

#: 256 bytes, EOS, and rows to spare.
VOCAB = 260


def _byte_chars() -> dict[int, str]:
    """GPT-2's printable character per byte, which ``ByteLevel`` maps bytes to."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = {b: chr(b) for b in printable}
    for extra, byte in enumerate(b for b in range(256) if b not in chars):
        chars[byte] = chr(256 + extra)
    return chars


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """One token per UTF-8 byte (id = byte value) and ``</s>`` (id 256) as EOS."""
    vocab = {char: byte for byte, char in _byte_chars().items()}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="</s>")
    assert tokenizer.eos_token_id == 256
    return tokenizer


def _save(model: torch.nn.Module, folder: Path) -> Path:
    model.save_pretrained(str(folder))  # type: ignore[operator]
    byte_level_tokenizer().save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def llama_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(1)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        eos_token_id=256, bos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    return _save(LlamaForCausalLM(config), tmp_path_factory.mktemp("llama") / "base")


@pytest.fixture(scope="session")
def falcon_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(2)
    config = FalconConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        multi_query=True, parallel_attn=True, bias=False, alibi=False,
        max_position_embeddings=64, eos_token_id=256, bos_token_id=None,
    )  # fmt: skip
    return _save(FalconForCausalLM(config), tmp_path_factory.mktemp("falcon") / "base")


@pytest.fixture(scope="session")
def gpt2_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shape `make export-hf` writes: GPT-2 (Conv1D projections), 256 byte ids, no
    special tokens."""
    torch.manual_seed(3)
    config = GPT2Config(
        vocab_size=256, n_positions=64, n_embd=32, n_layer=2, n_head=2,
        activation_function="gelu_pytorch_tanh", bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    folder = tmp_path_factory.mktemp("gpt2") / "base"
    GPT2LMHeadModel(config).save_pretrained(str(folder))
    tokenizer = byte_level_tokenizer()
    core = json.loads(tokenizer.backend_tokenizer.to_str())
    core["added_tokens"] = []  # the byte tokenizer alone: ids 0-255
    (folder / "tokenizer.json").write_text(json.dumps(core), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}), encoding="utf-8"
    )
    (folder / "hf_export.json").write_text("{}", encoding="utf-8")  # the base's own record
    return folder
