"""Kubeflow Pipelines on the cluster: `spec` (`PipelinesSpec`, names and pins),
`manifests` (upstream's install rendered with the platform's patches, placed per stack),
`loop` (the pipeline's upload, its recurring run and the drift alert's route to a run)
and `component` (`KubeflowPipelines`)."""
