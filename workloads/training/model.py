"""A GPT-2 style decoder-only language model.

Pre-norm blocks (LayerNorm, causal self-attention, GELU MLP), learned positional
embeddings, and an LM head tied to the token embedding, as in GPT-2. Attention uses
`torch.nn.functional.scaled_dot_product_attention` (the flash kernel on CUDA in bf16)
or, when ``sdpa`` is off, the explicit masked softmax it replaces, so the benchmark
can measure the difference on the same weights.

The loss is either the plain LM head + ``cross_entropy`` over the full
``(tokens, vocabulary)`` logits, or `chunked_linear_cross_entropy`, which computes
them a chunk of rows at a time together with their gradients, so the full logits
(3.3 GB in bf16 and 6.6 GB up-cast to fp32 for GPT-2 at 32 x 1024 tokens), and
their gradient, are never held in memory.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from workloads.training.compat import autocast_dtype, no_autocast
from workloads.training.config import ModelConfig


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``hidden @ weight.T`` against ``targets``, a chunk of rows
    at a time. The forward pass also computes both gradients (the softmax minus the
    one-hot target is all the backward needs), so the backward only scales them."""

    @staticmethod
    def forward(  # noqa: PLR0917 - apply() passes the arguments positionally
        ctx: torch.autograd.function.FunctionCtx,
        hidden: Tensor,
        weight: Tensor,
        targets: Tensor,
        chunk: int,
        compute_dtype: torch.dtype | None,
    ) -> Tensor:
        rows = hidden.shape[0]
        dtype = compute_dtype or hidden.dtype
        with no_autocast(hidden.device.type):
            w = weight.to(dtype)
            grad_hidden = torch.empty_like(hidden)
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
            for start in range(0, rows, chunk):
                h = hidden[start : start + chunk].to(dtype)
                t = targets[start : start + chunk]
                # fp32 for the softmax, as cross_entropy under autocast does.
                logits = (h @ w.t()).float()
                lse = torch.logsumexp(logits, dim=-1)
                loss += (lse - logits.gather(1, t.unsqueeze(1)).squeeze(1)).sum()
                grad_logits = torch.exp(logits - lse.unsqueeze(1))
                grad_logits.scatter_add_(
                    1, t.unsqueeze(1), torch.full_like(t, -1, dtype=grad_logits.dtype).unsqueeze(1)
                )
                grad_logits = (grad_logits / rows).to(dtype)
                grad_hidden[start : start + chunk] = (grad_logits @ w).to(hidden.dtype)
                grad_weight += (grad_logits.t() @ h).float()
        ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        return loss / rows

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_loss: Tensor
    ) -> tuple[Tensor, Tensor, None, None, None]:
        grad_hidden, grad_weight = ctx.saved_tensors  # type: ignore[attr-defined]
        return grad_hidden * grad_loss, grad_weight * grad_loss, None, None, None


def chunked_linear_cross_entropy(
    hidden: Tensor, weight: Tensor, targets: Tensor, chunk: int
) -> Tensor:
    """``cross_entropy(hidden @ weight.T, targets)`` (mean) without the full logits.

    Args:
        hidden: ``(rows, width)`` final hidden states.
        weight: ``(vocabulary, width)`` LM-head weight.
        targets: ``(rows,)`` token ids.
        chunk: rows of logits computed at once.

    Under autocast the matmuls run in the autocast dtype and the softmax in fp32, as
    the plain path computes them.
    """
    compute = autocast_dtype(hidden.device.type)
    loss: Tensor = _ChunkedLinearCrossEntropy.apply(  # type: ignore[no-untyped-call]
        hidden, weight, targets, chunk, compute
    )
    return loss


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention."""

    def __init__(self, config: ModelConfig, use_sdpa: bool) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.head_dim = config.attn_head_dim
        # n_embd unless heads were pruned (`ModelConfig.head_dim`).
        self.inner = config.attn_width
        self.dropout = config.dropout
        self.use_sdpa = use_sdpa
        self.c_attn = nn.Linear(config.n_embd, 3 * self.inner)
        self.c_proj = nn.Linear(self.inner, config.n_embd)
        self.c_proj.residual_scale = True  # type: ignore[assignment]
        self.resid_dropout = nn.Dropout(config.dropout)
        if not use_sdpa:
            # Non-persistent: the state dict is the same with or without SDPA.
            mask = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
            self.register_buffer("causal_mask", mask.view(1, 1, *mask.shape), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, _ = x.shape
        head_dim = self.head_dim  # n_embd // n_head unless heads were pruned
        # Heads counted from the projection's width, not n_head: under tensor parallelism
        # (`workloads.training.tp`) each rank's c_attn yields its own heads' q, k and v.
        q, k, v = self.c_attn(x).chunk(3, dim=2)
        q = q.view(batch, seq, -1, head_dim).transpose(1, 2)
        k = k.view(batch, seq, -1, head_dim).transpose(1, 2)
        v = v.view(batch, seq, -1, head_dim).transpose(1, 2)
        dropout_p = self.dropout if self.training else 0.0
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
            mask: Tensor = self.causal_mask[:, :, :seq, :seq]  # type: ignore[index]
            scores = scores.masked_fill(~mask, float("-inf"))
            weights = F.dropout(F.softmax(scores, dim=-1), p=dropout_p)
            y = weights @ v
        y = y.transpose(1, 2).contiguous().view(batch, seq, -1)
        out: Tensor = self.resid_dropout(self.c_proj(y))
        return out


class MLP(nn.Module):
    """The GELU feed-forward layer (4x wide unless pruned: `ModelConfig.mlp_width`)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.mlp_hidden)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(config.mlp_hidden, config.n_embd)
        self.c_proj.residual_scale = True  # type: ignore[assignment]
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.dropout(self.c_proj(self.gelu(self.c_fc(x))))
        return out


class Block(nn.Module):
    """One pre-norm transformer block."""

    def __init__(self, config: ModelConfig, use_sdpa: bool) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config, use_sdpa)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        out: Tensor = x + self.mlp(self.ln_2(x))
        return out


class GPT(nn.Module):
    """GPT-2 style language model.

    Args:
        config: the model's shape.
        use_sdpa: attention through ``scaled_dot_product_attention``.
        pad_vocab: pad the embedding / LM-head rows to a multiple of 64. The padded
            rows are never a target, so training learns to give them no mass.
        loss_chunk: compute the loss with `chunked_linear_cross_entropy` in chunks
            of this many rows (0: the plain LM head and ``cross_entropy``).
        activation_checkpointing: run each block under `torch.utils.checkpoint`
            (non-reentrant) when gradients are enabled: the forward keeps only the
            block's input and the backward recomputes the block's activations.
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        use_sdpa: bool = True,
        pad_vocab: bool = True,
        loss_chunk: int = 0,
        activation_checkpointing: bool = False,
    ):
        super().__init__()
        self.config = config
        self.loss_chunk = loss_chunk
        self.activation_checkpointing = activation_checkpointing
        self.vocab_rows = config.padded_vocab_size(pad_vocab)
        self.wte = nn.Embedding(self.vocab_rows, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, use_sdpa) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, self.vocab_rows, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as GPT-2
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        # GPT-2's init: N(0, 0.02), residual projections scaled by 1/sqrt(2 * n_layer)
        # so the residual stream's variance does not grow with depth.
        if isinstance(module, nn.Linear):
            std = 0.02
            if getattr(module, "residual_scale", False):
                std *= (2 * self.config.n_layer) ** -0.5
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_parameters(self) -> int:
        """Distinct parameters (the tied LM head counted once)."""
        return sum(p.numel() for p in self.parameters())

    def hidden(self, idx: Tensor) -> Tensor:
        """The final (normalised) hidden states, ``(batch, seq, n_embd)``."""
        _, seq = idx.shape
        positions = torch.arange(seq, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(positions))
        recompute = self.activation_checkpointing and torch.is_grad_enabled()
        for block in self.blocks:
            # Non-reentrant checkpointing: works with FSDP2's and ZeRO-3's parameter
            # hooks, with torch.compile, and with inputs that need no gradient.
            x = checkpoint(block, x, use_reentrant=False) if recompute else block(x)
        out: Tensor = self.ln_f(x)
        return out

    def logits(self, idx: Tensor) -> Tensor:
        """Next-token logits, ``(batch, seq, vocab_rows)``."""
        out: Tensor = self.lm_head(self.hidden(idx))
        return out

    def forward(self, idx: Tensor, targets: Tensor) -> Tensor:
        """Mean next-token cross-entropy of ``idx`` against ``targets``."""
        hidden = self.hidden(idx)
        if self.loss_chunk:
            return chunked_linear_cross_entropy(
                hidden.reshape(-1, hidden.size(-1)),
                self.lm_head.weight,
                targets.reshape(-1),
                self.loss_chunk,
            )
        logits = self.lm_head(hidden)
        # Under bf16 autocast cross_entropy runs in fp32 (it is on autocast's fp32 list).
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def flops_per_token(config: ModelConfig, num_params: int, seq_len: int) -> float:
    """Training FLOPs per token: 6 * params for the matmuls (forward and backward)
    plus the attention score/value term 12 * layers * width * seq_len (PaLM appendix B,
    as nanoGPT and llm.c count it). The position embedding is a lookup, not a matmul,
    so it is left out."""
    matmul_params = num_params - config.block_size * config.n_embd
    return 6.0 * matmul_params + 12.0 * config.n_layer * config.attn_width * seq_len
