"""CastSlice: a mutating admission webhook that moves opted-in Pods onto shared GPUs."""

__version__ = "0.2.0"
