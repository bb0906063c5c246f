"""Cost allocation: OpenCost, the cost recording rules, budgets and dashboard (`spec`:
`CostInputs` and the objects; `component`: `CostAllocation`)."""
