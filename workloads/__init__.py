"""Bundled PyTorch training workloads: a GPT-style model, its data, training loop,
checkpointing, metrics, GPU telemetry and health, fabric settings, and the
`TrainingJob` component that deploys them (see ``docs/workloads.md``)."""
