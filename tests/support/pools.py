"""Node pool profiles the tests of several layers share."""

from __future__ import annotations

from modules.pools import NodePoolProfile

#: An EKS p5en.48xlarge pool on EFA, as the AWS foundation describes it.
P5EN = NodePoolProfile(
    "gpu-p5en",
    "gpu",
    "p5en.48xlarge",
    vcpus=192,
    memory_gib=2048,
    gpus_per_node=8,
    accelerator="nvidia-h200",
    gpu_memory_gib=141,
    fabric="efa",
    efa_interfaces=16,
    max_size=4,
)
