"""Where the cluster runs: the site it declares (`spec`), and what each kind of cluster
provides: on EKS the AWS foundation's outputs (`eks`), on premises config (`onprem`).

Import the modules, not this package: it re-exports nothing, so importing a spec never
runs a component."""
