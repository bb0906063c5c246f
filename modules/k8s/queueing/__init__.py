"""Queueing: Kueue, its flavors, the teams' queues and the PriorityClasses (`spec`:
`QueueingSpec` and the objects; `component`: `Queueing`)."""
