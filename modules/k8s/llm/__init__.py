"""LLM serving on the cluster: `spec` (the ``llm`` section, each model's placement, the
gateway's `LLMBackend`), `presets` (KServe's LLMInferenceServiceConfig presets,
restricted), `manifests` (the models' objects, the charts' values), `network` (the
KEDA and LeaderWorkerSet namespaces' NetworkPolicies) and `component` (`LLMServing`)."""
