"""Read-only residency audit of a live AWS account (``make audit``)."""
