"""Experiments room: multirun sweeps of train + evaluate cells (``sweep``), their table
(``table``), plots (``plots``) and aggregation (``aggregate``), and the decode / training
throughput benchmark (``bench``)."""
