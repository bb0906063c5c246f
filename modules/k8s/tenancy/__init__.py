"""Tenancy: the teams (`spec`: `TeamSpec` and the objects of each team namespace), how
their quotas map onto node pools (`quotas`, also used by queueing, fleet and the stack
config) and the component (`component`: `Tenancy`)."""
