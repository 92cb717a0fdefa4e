"""The environment for a child process that runs a skipdecode entry point in the tests."""

from __future__ import annotations

import os

OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
}


def offline_env(**extra: str) -> dict[str, str]:
    """This process's environment with every hub offline, plus ``extra``.

    ``WANDB_SERVICE`` is dropped: an earlier in-process W&B run leaves it set, and a child that
    inherits it attaches to this process's W&B service instead of starting its own, so a run id
    the child's killed predecessor used stays "in use" there.
    """
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    env.update(OFFLINE)
    env.update(extra)
    return env
