"""LoRA fine-tuning of a Hugging Face causal LM (`make finetune`, docs/finetune.md).

`workloads.finetune.lora` does the work; ``python -m workloads.finetune BASE --data DATA
--out OUT`` is its command line.
"""
