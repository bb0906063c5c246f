"""``python -m workloads.finetune BASE --data DATA --out OUT`` (`make finetune`)."""

import sys

from workloads.finetune.cli import main

sys.exit(main())
