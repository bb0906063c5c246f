"""A tiny GPT-2-architecture model in Hugging Face format, as the tests' stand-in for
`make export-hf`'s output: the tiny preset's shape (2 layers, 2 heads of 32, 64 wide,
128 positions), a byte-level tokenizer whose 256 tokens are the 256 byte values (the
trainer's tokenisation), no chat template of its own, random weights (the tests check
the protocol and the serving, not what the model says)."""

from __future__ import annotations

from pathlib import Path

#: The tiny preset's shape (workloads/training/config.py): head size 64 / 2 = 32, which
#: vLLM's CPU attention runs (it refuses 16).
SHAPE = {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 128, "vocab_size": 256}


def byte_symbols() -> dict[int, str]:
    """GPT-2's byte-to-character table: byte-level BPE writes byte b as this character."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def write_tiny_gpt2(out: Path, seed: int = 0, **shape: int) -> Path:
    """Write the model (``config.json``, ``model.safetensors``, the tokenizer) to ``out``."""
    import torch  # noqa: PLC0415 - slow imports, in the fixture that needs them
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: PLC0415
    from transformers import (  # noqa: PLC0415
        GPT2Config,
        GPT2LMHeadModel,
        PreTrainedTokenizerFast,
    )

    vocab = {symbol: b for b, symbol in byte_symbols().items()}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    # No regex split and no merges: every byte is one token, its id the byte's value.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    torch.manual_seed(seed)
    # No BOS/EOS: the byte vocabulary has no special tokens (generation ends at max_tokens).
    config = GPT2Config(**{**SHAPE, **shape}, bos_token_id=None, eos_token_id=None)
    GPT2LMHeadModel(config).save_pretrained(out)
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(out)
    return out
