"""Images from a mirror in the country: the references each layer pulls.

Every layer takes its images from a registry the stack names or creates (on AWS the
stack's own ECR; on premises the site's), under a repository path of its own or the
upstream one. These are the small pieces they share. Standard library only: specs
import it.
"""

from __future__ import annotations


def mirror_image(registry: str | None, section: str, repository: str, tag: str) -> str:
    """``<registry>/<repository>:<tag>``; ``registry`` (the ``section``'s) must be
    resolved by then: on AWS the foundation sets it."""
    if registry is None:
        raise ValueError(f"{section}.registry is unresolved (set by the AWS foundation)")
    return f"{registry}/{repository}:{tag}"


def mirror_path(upstream: str) -> str:
    """An upstream repository's path under a mirror: the path without its registry
    host (``nvcr.io/nvidia/cuda`` -> ``nvidia/cuda``)."""
    return upstream.split("/", 1)[1]


def chart_image(reference: str) -> dict[str, str]:
    """A ``<repository>:<tag>`` reference in the charts' ``{repository, tag}`` form."""
    repository, _, tag = reference.rpartition(":")
    return {"repository": repository, "tag": tag}
