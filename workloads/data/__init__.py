"""Token shards and the data that goes into them: the on-disk format, the memory-mapped
loader, the single-process tokenizer and the small corpus shipped with the package; and
the Spark preprocessing job (`prepare`: cleaning, validation, deduplication, PII
anonymisation, tokenisation) with its versioned-dataset manifest (`manifest`), which the
trainer verifies (docs/data.md)."""
