"""``python -m workloads.health``: the entry-point name that the shipped plans' GPU
preflight init containers run (from `modules.k8s.trainer.training_job.manifests`),
kept so that images and plans stay as they are. The check itself is `workloads.training.health`."""

from __future__ import annotations

import sys

from workloads.training.health import main

if __name__ == "__main__":
    sys.exit(main())
