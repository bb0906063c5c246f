"""``python -m workloads.fabric_check``: the entry-point name that a fabric-check
TrainingJob's containers run (``torchrun ... -m workloads.fabric_check``, from
`modules.k8s.trainer.training_job.manifests`), kept so that images and plans stay as
they are. The check itself is `workloads.training.fabric_check`."""

from __future__ import annotations

import sys

from workloads.training.fabric_check import main

if __name__ == "__main__":
    sys.exit(main())
