"""The RDMA fabric between GPU nodes: EFA on EKS, InfiniBand on premises (`spec`:
`InfinibandSpec` and the objects; `component`: `Fabric`)."""
