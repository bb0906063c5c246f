"""Entry point `pulumi up` runs: builds the platform for the selected stack."""

from stacks.program import main

main()
