"""Authentication and authorisation in the host: who the caller is, what they may do.

Providers and authorisers are plugins; resolving the caller once per request
(:mod:`.middleware`), role matching (:mod:`.roles`), the per-stream policy
(:mod:`.policy`) and the error answers (:mod:`.responses`) are host logic, so every
provider gets the same, audited decisions.
"""
