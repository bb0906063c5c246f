"""Kubeflow Pipelines: the data-to-model pipeline (`pipeline`), its steps as data
(`steps`), as container components for the cluster (`components`) and as lightweight
components for KFP's local runner (`local_components`, `runner`), and the local driver
behind `make pipeline` (`local`). docs/pipelines.md."""
