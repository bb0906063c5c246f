"""Where the cluster runs: the site it declares (`spec`: `SiteSpec`; `component`:
`SiteDeclaration`), and what each kind of cluster provides: on EKS the AWS foundation's
outputs (`eks`: `EksInputs`), on premises its config (`onprem`: `OnPremSpec`)."""
