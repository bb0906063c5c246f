"""The feature store's online store on AWS: ElastiCache (Redis OSS) in the stack's region.

`spec` holds the typed, validated settings (pure); `component` the Pulumi component.
"""
