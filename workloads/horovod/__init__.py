"""The Horovod example the MPI runtime runs (``train.py``, image ``Dockerfile``)."""
