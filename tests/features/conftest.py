"""The features image's tests (`make test-features`). They need that image's packages
(Feast, LightGBM, onnxmltools, ONNX Runtime, MLflow, KServe 0.21; pyproject's
``features`` extra, plus tritonclient[http] as the independent V2 client); in an
environment without Feast they are skipped as a whole, with that reason."""

from __future__ import annotations

import pytest

pytest.importorskip("feast", reason="the features extra is not installed (make test-features)")
