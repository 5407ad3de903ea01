"""The simulated engine: a paged KV cache with prefix reuse and a selectable admission policy, over HTTP."""
