"""Kubeflow Pipelines on the cluster: `spec` (`PipelinesSpec`, names and pins),
`manifests` (the pinned upstream install, adapted), `loop` (the pipeline's upload, its
recurring run and the drift alert's route to a run) and `component`
(`KubeflowPipelines`)."""
