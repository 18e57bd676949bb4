"""End-to-end suite: CastSlice called by a real kube-apiserver over TLS.

Run with `pytest tests/e2e`; `python -m tests.e2e up` starts the same
environment by hand.
"""
