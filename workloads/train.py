"""``python -m workloads.train``: the entry-point name that the training image's default
command and every shipped plan's training containers run (``torchrun ... -m
workloads.train``, from `modules.k8s.trainer.training_job.manifests`), kept so that
images and plans stay as they are. The trainer itself is `workloads.training.train`."""

from __future__ import annotations

import sys

from workloads.training.train import main

if __name__ == "__main__":
    sys.exit(main())
