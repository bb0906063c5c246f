"""The GPT model: one forward/backward step, attention paths agree, FLOP counting."""

from __future__ import annotations

import torch

from workloads.training.config import ModelConfig, preset
from workloads.training.model import GPT, flops_per_token

TINY = ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256)


def test_one_forward_backward_step_updates_every_parameter() -> None:
    torch.manual_seed(0)
    model = GPT(TINY)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    idx = torch.randint(0, 256, (4, 16))
    loss = model(idx, torch.roll(idx, -1, dims=1))
    assert loss.ndim == 0 and torch.isfinite(loss)
    # An untrained model predicts roughly uniformly over the (padded) vocabulary.
    assert abs(loss.item() - torch.log(torch.tensor(256.0)).item()) < 0.5
    loss.backward()
    optimizer.step()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert not torch.equal(before[name], p.detach()), f"{name} did not change"


def test_sdpa_and_explicit_attention_compute_the_same_function() -> None:
    torch.manual_seed(0)
    fast = GPT(TINY, use_sdpa=True)
    slow = GPT(TINY, use_sdpa=False)
    slow.load_state_dict(fast.state_dict())  # same keys: the mask is not persistent
    idx = torch.randint(0, 256, (2, 16))
    torch.testing.assert_close(fast.logits(idx), slow.logits(idx), rtol=1e-5, atol=1e-5)


def test_attention_is_causal() -> None:
    torch.manual_seed(0)
    model = GPT(TINY).eval()
    idx = torch.randint(0, 256, (1, 16))
    changed = idx.clone()
    changed[0, -1] = (idx[0, -1] + 1) % 256
    torch.testing.assert_close(model.logits(idx)[0, :-1], model.logits(changed)[0, :-1])


def test_lm_head_is_tied_and_vocab_padded() -> None:
    config = ModelConfig(n_layer=1, n_head=1, n_embd=8, block_size=4, vocab_size=100)
    model = GPT(config)
    assert model.lm_head.weight is model.wte.weight
    assert model.wte.num_embeddings == 128
    assert GPT(config, pad_vocab=False).wte.num_embeddings == 100


def test_gpt2_124m_has_124m_parameters_and_its_flops() -> None:
    config = preset("gpt2-124m").model
    with torch.device("meta"):
        model = GPT(config)
    params = model.num_parameters()
    assert 124_000_000 < params < 125_000_000  # 124.5M with the padded vocabulary
    flops = flops_per_token(config, params, 1024)
    matmul = params - 1024 * 768
    assert flops == 6 * matmul + 12 * 12 * 768 * 1024
