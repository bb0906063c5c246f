"""CrossGuard policy pack for the sovereign GPU platform, its offline review and live audit.

The rules live in `policies.rules` (one module per concern, one function per rule);
`policies.pack` turns them into `pulumi_policy` policies, which the pack's entry
(``__main__.py``, run by ``pulumi preview --policy-pack policies``) and the offline
review (`policies.review`) both call, so the two agree on every result.
"""
