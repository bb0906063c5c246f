"""A training job on the platform (`TrainingJob`): `spec` (`TrainingJobSpec`, validated),
`manifests` (the Kueue-queued Kubeflow Trainer TrainJob, or an Indexed Job and its
Service, that the spec decides) and `component` (`TrainingJob`, the thin Pulumi
component a stack creates). Imports nothing, so that importing the pure modules does
not import the component."""
