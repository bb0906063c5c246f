"""``python -m workloads.finetune BASE --data DATA --out OUT`` (`make finetune`)."""

import sys

from workloads.finetune.lora import main

sys.exit(main())
