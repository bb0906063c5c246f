"""The Kubernetes platform layer: one package per cluster service, in layers.

* shared (the flat modules here): `names`, `versions`, `objects`, `common`; they import
  no service package;
* each service package (``gpu``, ``fabric``, ``monitoring``, ``tenancy``, ``storage``,
  ``queueing``, ``fleet``, ``serving``, ``tracking``, ``cost``, ``autoscaler``,
  ``site``): ``spec.py`` with its typed settings and the pure functions that decide its
  objects (some packages split those into further pure modules), and ``component.py``
  with the Pulumi component that only registers them;
* ``platform.spec``: the aggregate `KubernetesPlatformArgs`, built from the specs only;
* the components, which take the aggregate; no component imports another;
* ``platform.component``: `KubernetesPlatform`, composing the components.

The package ``__init__`` files re-export nothing: importing a spec never runs a
component. ``tests/test_import_cycles.py`` holds the layers and refuses import cycles.
"""
