"""The cluster's PKI: cert-manager, the cluster CA, and the certificates services serve."""
