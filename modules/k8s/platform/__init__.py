"""The Kubernetes platform layer as a whole: `spec` (the aggregate
`KubernetesPlatformArgs`: imports the services' specs only), `summary` (what the plan
summary prints) and `component` (`KubernetesPlatform`, composing the services'
components)."""
