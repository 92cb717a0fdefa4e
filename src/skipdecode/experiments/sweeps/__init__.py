"""Sweeps and their results: running cells, tables over seeds, publishing, and the pages written from the records."""
