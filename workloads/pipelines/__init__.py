"""Kubeflow Pipelines: the ``data-to-model`` pipeline and what starts it on the cluster.

`publish` uploads the compiled pipeline to KFP and keeps its recurring run (the
publisher Job); `trigger` turns Alertmanager's drift notifications into runs (the
retrain trigger); `kfp_api` is what both share. All three talk to KFP only through the
KFP SDK's client.
"""
