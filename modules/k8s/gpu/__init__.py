"""GPU enablement: the NVIDIA GPU Operator (`spec`: its values and ConfigMaps;
`component`: `GpuEnablement`)."""
