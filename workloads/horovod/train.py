"""A small data-parallel PyTorch training run with Horovod, for the MPI runtime.

Run by ``mpirun`` on the MPI ClusterTrainingRuntime (one rank per GPU, or one per node
on CPU pools), or on a laptop with Open MPI and Horovod installed::

    mpirun -np 2 python workloads/horovod/train.py --steps 20 --ckpt-dir /tmp/hvd

What it does, and checks, with Horovod's own API:

* ``hvd.init()``; each rank takes the GPU of its local rank (CUDA) or runs on CPU;
* a first all-reduce of each rank's number must equal the sum over ranks, or the run
  stops with exit status 1 before training (a broken MPI/NCCL path fails loudly);
* a fixed regression task (y = x @ w_true + noise, generated from a seed, each rank its
  own shard), a two-layer MLP, SGD with momentum wrapped in
  ``hvd.DistributedOptimizer`` (gradients averaged across ranks each step), the
  learning rate scaled by the number of ranks, parameters and optimizer state
  broadcast from rank 0;
* rank 0 logs the loss averaged over ranks every ``--log-every`` steps and writes a
  checkpoint (``<ckpt-dir>/horovod-final.pt``) at the end.

Exit status: 0 done, 1 the all-reduce check failed, 2 bad arguments (the runtime's pod
failure policy fails the job at once on 2: a retry cannot help).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

EXIT_OK = 0
EXIT_ALLREDUCE = 1
EXIT_USAGE = 2


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="workloads/horovod/train.py", description="Horovod data-parallel example."
    )
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01, help="per rank; scaled by ranks")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ckpt-dir", default="", help="rank 0 writes its checkpoint here")
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size", "features", "hidden", "log_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.lr <= 0:
        parser.error("--lr must be > 0")
    return args


def allreduce_check(hvd: Any, device: torch.device) -> bool:
    """Sum each rank's (rank + 1) over all ranks: n(n+1)/2 when the path works."""
    mine = torch.tensor([float(hvd.rank() + 1)], device=device)
    total = hvd.allreduce(mine, op=hvd.Sum, name="allreduce_check")
    expected = hvd.size() * (hvd.size() + 1) / 2
    return bool(abs(float(total.item()) - expected) < 1e-6)


def make_data(
    hvd: Any, args: argparse.Namespace, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's shard of a fixed regression task (same task on every rank)."""
    task = torch.Generator().manual_seed(args.seed)
    w_true = torch.randn(args.features, 1, generator=task)
    shard = torch.Generator().manual_seed(args.seed + 1 + hvd.rank())
    x = torch.randn(args.batch_size * args.steps, args.features, generator=shard)
    y = x @ w_true + 0.01 * torch.randn(x.shape[0], 1, generator=shard)
    return x.to(device), y.to(device)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    # Imported once the arguments are good: a usage error needs no MPI.
    hvd = importlib.import_module("horovod.torch")
    hvd.init()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(hvd.local_rank())
    device = torch.device("cuda", hvd.local_rank()) if cuda else torch.device("cpu")
    if not allreduce_check(hvd, device):
        print(f"horovod: rank {hvd.rank()}: all-reduce check FAILED", file=sys.stderr)
        return EXIT_ALLREDUCE
    if hvd.rank() == 0:
        print(f"horovod: {hvd.size()} ranks, all-reduce check OK, device {device.type}")
    torch.manual_seed(args.seed)
    model = nn.Sequential(
        nn.Linear(args.features, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 1)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    x, y = make_data(hvd, args, device)
    loss_fn = nn.MSELoss()
    started = time.perf_counter()
    loss = torch.zeros((), device=device)
    for step in range(args.steps):
        batch = slice(step * args.batch_size, (step + 1) * args.batch_size)
        optimizer.zero_grad()
        loss = loss_fn(model(x[batch]), y[batch])
        loss.backward()
        optimizer.step()
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            mean = hvd.allreduce(loss.detach(), op=hvd.Average, name=f"loss_{step}")
            if hvd.rank() == 0:
                print(f"horovod: step {step + 1}/{args.steps} loss {float(mean.item()):.6f}")
    if hvd.rank() == 0:
        elapsed = time.perf_counter() - started
        print(f"horovod: done in {elapsed:.2f} s, final loss {float(loss.item()):.6f}")
        if args.ckpt_dir:
            os.makedirs(args.ckpt_dir, exist_ok=True)
            path = os.path.join(args.ckpt_dir, "horovod-final.pt")
            torch.save({"model": model.state_dict(), "steps": args.steps}, path)
            print(f"horovod: checkpoint {path}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
