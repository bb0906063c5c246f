"""A served model version (`InferenceService`): `spec` (`InferenceServiceSpec`,
validated), `manifests` (the KServe InferenceService, its TLS proxy, NetworkPolicies and
Service), `drift` (the drift service beside it) and `component` (`InferenceService`, the
thin Pulumi component a stack creates). Imports nothing, so that importing the pure
modules does not import the component."""
