"""`make finetune`'s command line: LoRA (`workloads.finetune.lora`) or, with ``--full``, a
full fine-tune sharded with FSDP2 (`workloads.finetune.full`, which builds on the LoRA
module's checks, data and output handling; this module imports both, so neither imports
the other back)."""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from workloads.finetune import full
from workloads.finetune.lora import (
    ADAPTER_DIR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USER_ERROR,
    MERGED_DIR,
    RECORD_FILE,
    FinetuneError,
    Options,
    build_parser,
    finetune,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.base is None) == (args.base_model is None):
        parser.error("give the base model's folder once: BASE or --base-model BASE")
    base: Path = args.base or args.base_model
    logging.getLogger("torch.distributed").setLevel(logging.ERROR)
    # PEFT calls a transformers method that transformers 5 deprecates; not the user's to fix.
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    options = Options(
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        learning_rate=args.learning_rate,
        rank=args.rank,
        alpha=args.alpha,
        dropout=args.dropout,
        target_modules=args.target_modules,
        seed=args.seed,
        log_every=args.log_every,
        logit_atol=args.logit_atol,
    )
    if args.nproc != 1 and not args.full:
        parser.error("--nproc (NPROC=) is for a full fine-tune: add --full")
    try:
        if args.full:
            result = full.finetune(base, args.data, args.out, options, args.nproc)
        else:
            result = finetune(base, args.data, args.out, options)
    except FinetuneError as err:
        print(f"finetune: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as err:
        print(
            f"finetune: cannot write the output ({err.strerror or err}); nothing at OUT changed",
            file=sys.stderr,
        )
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("finetune: interrupted; nothing at OUT was changed", file=sys.stderr)
        return EXIT_INTERRUPTED
    first, last = result.losses[0][1], result.losses[-1][1]
    if args.full:
        print(
            f"finetune: {args.out}/ ({MERGED_DIR}/, {RECORD_FILE}); full fine-tune of all "
            f"{result.total_parameters} parameters in {args.nproc} FSDP2 process(es); "
            f"loss {first:.4f} -> {last:.4f}; saved = sharded within "
            f"{result.merged_max_abs_logit_diff:.1e}"
        )
        return EXIT_OK
    print(
        f"finetune: {args.out}/ ({ADAPTER_DIR}/, {MERGED_DIR}/, {RECORD_FILE}); "
        f"{result.trainable_parameters} of {result.total_parameters} parameters trained; "
        f"loss {first:.4f} -> {last:.4f}; merged = adapted within "
        f"{result.merged_max_abs_logit_diff:.1e}"
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
