"""``make pin-images STACK=<stack>``: the digest of every image the stack's Kubernetes
objects run, from the stack's in-region ECR, into its image lock (`stacks.image_lock`).

Reads the stack's offline plan for the image references, asks ECR (DescribeImages, the
caller's credentials) for each tag's digest, and writes ``stacks/images/<stack>.json``
only when every ECR image resolved; a tag missing from its repository is named (mirror
it first) and nothing is written. Replaces no file but an image lock.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from .config import parse_stack_config
from .config_parsing import ConfigError
from .image_lock import (
    LockError,
    check_replaceable,
    ecr_image,
    lock_document,
    lock_path,
    object_images,
    resolve,
    write_lock,
)
from .offline_plan import PlanError, available_stacks, build_plan, load_stack_file
from .offline_runtime import ACCOUNT_ID


def stack_images(stack: str) -> list[str]:
    """Every image reference the stack's Kubernetes objects name, from its offline plan
    (Helm releases' values excluded: they are not pinned)."""
    steps = (step.get("newState") or {} for step in build_plan(stack)["steps"])
    found = object_images((str(state.get("type", "")), state.get("inputs")) for state in steps)
    # An image the stack's lock already pins is asked for again by its tag.
    references = {ref.split("@", 1)[0] for ref in found}
    return sorted(references)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stacks.pin_images",
        description="Every image of STACK pinned to its ECR digest -> stacks/images/STACK.json",
    )
    parser.add_argument("stack", help="a shipped stack (stacks/Pulumi.<stack>.yaml)")
    parser.add_argument("--out", type=Path, default=None, help="default: stacks/images/STACK.json")
    options = parser.parse_args(argv)

    stack = options.stack
    if stack not in available_stacks():
        print(
            f"pin-images: no stack {stack!r}; shipped stacks: {', '.join(available_stacks())}",
            file=sys.stderr,
        )
        return 2
    out = options.out or lock_path(stack)
    try:
        if out.exists():
            check_replaceable(
                out
            )  # refuse early: nothing asked of AWS for a file we would not write
        config = parse_stack_config(load_stack_file(stack)[0])
        references = stack_images(stack)
    except LockError as err:
        print(f"pin-images: {err}; it is left as it is: move it, or give --out", file=sys.stderr)
        return 2
    except (ConfigError, PlanError) as err:
        print(f"pin-images: the stack's plan fails first:\n{err}", file=sys.stderr)
        return 2
    images = [image for ref in references if (image := ecr_image(ref)) is not None]
    elsewhere = [ref for ref in references if ecr_image(ref) is None and "@" not in ref]
    region = config.region
    foreign = sorted({i.region for i in images} - {region})
    if foreign:
        print(f"pin-images: images in ECR outside {region} ({', '.join(foreign)})", file=sys.stderr)
        return 2
    import boto3  # noqa: PLC0415 - only this command asks AWS
    import botocore.exceptions  # noqa: PLC0415

    try:
        account = boto3.client("sts", region_name=region).get_caller_identity()["Account"]
        # The offline plan names the stack's own registry with a stand-in account: the
        # caller's is the one `pulumi up` will name.
        images = [replace(i, account=account) if i.account == ACCOUNT_ID else i for i in images]
        digests, missing = resolve(boto3.client("ecr", region_name=region), images)
    except botocore.exceptions.NoCredentialsError:
        print(
            "pin-images: no AWS credentials: sign in with an identity that may "
            "ecr:DescribeImages on the stack's repositories",
            file=sys.stderr,
        )
        return 2
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as err:
        print(f"pin-images: ECR refused the request: {err}", file=sys.stderr)
        return 2
    if missing:
        shown = "\n  ".join(missing[:20]) + (
            f"\n  ... and {len(missing) - 20} more" if len(missing) > 20 else ""
        )
        print(
            f"pin-images: {len(missing)} image(s) of {stack} are not in its registry "
            f"(mirror or push them first; nothing written):\n  {shown}",
            file=sys.stderr,
        )
        return 2
    document = lock_document(stack, region, account, digests, dt.datetime.now(dt.UTC))
    try:
        write_lock(out, document)
    except LockError as err:
        print(f"pin-images: {err}; it is left as it is: move it, or give --out", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"pin-images: cannot write {out}: {err.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {out}: {len(digests)} image(s) pinned in {region}")
    if elsewhere:
        names = ", ".join(elsewhere)
        print(f"not pinned (not an ECR <repository>:<tag> reference, not asked): {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
