"""The on-premises site's API audit-log policy: `spec` (typed, validated) and
`component` (the ConfigMap that ships it to the site's cluster)."""
