"""Training room: fine-tune a causal LM under a schedule with Lightning.

``module`` (the LightningModule; the schedule owns its loss), ``datamodule``, ``optim`` (the
learning-rate schedule), ``sharding`` (FSDP2), ``export`` (checkpoint -> transformers directory
+ ``skipdecode.json``) and ``train`` (``train(cfg)`` and the Hydra entry point).
"""
