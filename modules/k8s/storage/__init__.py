"""Storage: storage classes, the FSx CSI driver and each team's checkpoint volume
(`spec`: the objects; `component`: `Storage`)."""
