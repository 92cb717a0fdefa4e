"""skipdecode: SkipDecode-style layer skipping for batched, KV-cached autoregressive decoding."""

__version__ = "0.1.0"
