"""The trainer: a GPT-style model, its config and presets, the training loop and its
launcher, checkpointing, metrics, GPU telemetry and health, fabric settings, and the
GPU and fabric checks (see ``docs/workloads.md``).

Imports nothing: the offline plan (`make plan`, which has neither torch nor
prometheus_client) imports the torch-free modules here (`config`, `fabric`,
`metrics_endpoint`) through `modules.k8s.trainer.training_job` and `stacks.config`
(tests/test_import_cycles.py PULUMI_READS_FROM_WORKLOADS).
"""
