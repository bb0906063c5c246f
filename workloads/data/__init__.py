"""Token shards: the on-disk format, the memory-mapped loader, the tokenizer script and
the small corpus shipped with the package."""
