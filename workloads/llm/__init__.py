"""Language models served with vLLM's OpenAI-compatible server (docs/llm.md)."""
