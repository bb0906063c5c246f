"""The LLM gateway: Envoy Gateway with Envoy AI Gateway in front of the in-cluster LLM
services (one OpenAI-compatible endpoint, per-team keys and token limits; docs/llm-gateway.md)."""
