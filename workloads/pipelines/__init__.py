"""Kubeflow Pipelines: the ``data-to-model`` pipeline and what starts it.

The pipeline (`pipeline`), its steps as data (`steps`), as container components for the
cluster (`components`) and as lightweight components for KFP's local runner
(`local_components`, `runner`), and the local driver behind `make pipeline` (`local`).
On the cluster, `publish` uploads the compiled pipeline to KFP and keeps its recurring
run (the publisher Job); `trigger` turns Alertmanager's drift notifications into runs
(the retrain trigger); `kfp_api` is what both share, talking to KFP only through the KFP
SDK's client. docs/pipelines.md.
"""
