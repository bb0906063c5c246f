"""``make bootstrap``: the one-time, in-region set-up a new account needs before any
``pulumi login``: the state bucket, the secrets key, the account trail and, optionally,
an organisation guardrail (see ``python -m stacks.bootstrap --help``)."""
