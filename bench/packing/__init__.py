"""How many GPUs CastSlice saves on a production trace, replayed on the real scheduler.

See `python -m bench.packing --help` and docs/performance.md, "Packing a production trace".
"""
