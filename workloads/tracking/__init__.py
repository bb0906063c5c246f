"""The model registry side of tracking: the local MLflow tracking server (`server`) and
the registration of a tracked run's checkpoint as a model version (`register`).

The trainer's own MLflow client (rank 0's background logger, `start_tracking`) lives
with the trainer in `workloads.training.tracking`: the training image needs it, and the
trainer must not import the stages that come after it.
"""
