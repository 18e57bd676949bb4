"""CastSlice's benchmark against a functions-framework floor; see bench/README.md."""
