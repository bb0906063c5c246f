"""Model serving: `spec` (`ServingSpec` and the pinned charts and images), `manifests`
(cert-manager, KServe and metrics-server values, runtimes, identities), `observability`
(scrape, alert rules, dashboard) and `component` (`Serving`)."""
