"""The fleet: MultiKueue between a manager cluster and its workers (`spec`: `FleetSpec`,
`FleetWorkerSpec`, their inputs and the objects; `component`: `FleetManager`,
`FleetWorker`)."""
