"""Benchmarks: decode and training speed against their floors and peers, and the lossless mode's rounds."""
