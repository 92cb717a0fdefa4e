"""Hydra glue shared by every stage: where ``conf/`` is, the config resolvers, resolving a config
to plain data, the task wrapper, and instantiating callbacks and loggers."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

__all__ = [
    "register_resolvers",
    "config_dir",
    "task_wrapper",
    "instantiate_callbacks",
    "instantiate_loggers",
    "resolve_config",
    "run_id",
    "ConfigError",
    "close_wandb",
    "flag",
    "is_number",
    "count",
]

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


def _repo_root() -> str:
    env = os.environ.get("SKIPDECODE_ROOT")
    if env:
        return str(Path(env).expanduser().resolve())
    from .paths import repo_root

    root = repo_root()
    return str(root if root is not None else Path.cwd())


def _cache_dir() -> str:
    from .paths import cache_dir

    return str(cache_dir())


def _wandb_offline() -> bool:
    """W&B runs offline unless the environment asks for online logging with credentials."""
    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in ("offline", "disabled", "dryrun"):
        return True
    return not os.environ.get("WANDB_API_KEY")


def run_id(output_dir: str) -> str:
    """A W&B run id fixed by the run's output directory (a resumed run keeps its id)."""
    import hashlib

    path = str(Path(str(output_dir)).expanduser().resolve())
    return hashlib.sha256(path.encode()).hexdigest()[:16]


def register_resolvers() -> None:
    """``${sd_repo_root:}``, ``${sd_cache_dir:}``, ``${sd_wandb_offline:}``,
    ``${sd_run_id:<dir>}`` (idempotent)."""
    for name, fn in (
        ("sd_repo_root", _repo_root),
        ("sd_cache_dir", _cache_dir),
        ("sd_wandb_offline", _wandb_offline),
        ("sd_run_id", run_id),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


register_resolvers()


def config_dir() -> Path:
    """The ``conf/`` directory of the repository (``$SKIPDECODE_CONFIG_DIR`` overrides)."""
    env = os.environ.get("SKIPDECODE_CONFIG_DIR")
    return Path(env) if env else Path(_repo_root()) / "conf"


class ConfigError(ValueError):
    """A config cannot be resolved; the message names the key to set."""


def flag(value: Any, setting: str) -> bool:
    """A true/false setting as given: ``no``, ``0`` or ``"false"`` is refused by name, never
    read as Python's truth (``bool("no")`` is True)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{setting}={value!r} is not allowed; allowed: true or false")
    return value


def is_number(value: Any, kind: type) -> bool:
    """Whether a config value reads as ``kind`` (``int`` or ``float``): never a bool; an int,
    or a float where ``kind`` is float or the float is whole (YAML's ``4.0`` layers is 4)."""
    whole = isinstance(value, float) and value.is_integer()
    return not isinstance(value, bool) and (
        isinstance(value, int) or (isinstance(value, float) and (kind is float or whole))
    )


def count(value: Any, setting: str, minimum: int, null: str | None = None) -> Any:
    """``value`` as given where it is an integer >= ``minimum`` (or null, where ``null`` says
    what null means); anything else is refused by name with what is allowed."""
    if value is None and null:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        allowed = f"an integer >= {minimum}" + (f", or null ({null})" if null else "")
        raise ConfigError(f"{setting}={value!r} is not allowed; allowed: {allowed}")
    return value


def resolve_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The config as plain data with every interpolation resolved.

    Outside a Hydra run ``${hydra:...}`` cannot resolve; the error says which key to set.
    """
    if not isinstance(cfg, DictConfig):
        cfg = OmegaConf.create(dict(cfg))
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # type: ignore[return-value]
    except Exception as e:  # omegaconf raises several interpolation/missing error types
        msg = str(e)
        if "hydra" in msg.lower() or "HydraConfig" in msg:
            raise ConfigError(
                f"the config uses ${{hydra:...}} interpolations but this is not a Hydra run "
                f"({msg.splitlines()[0]}); set them explicitly, e.g. output_dir=/some/dir"
            ) from e
        raise ConfigError(f"the config cannot be resolved: {msg.splitlines()[0]}") from e


def close_wandb() -> None:
    """Finish a W&B run left open (one failed job must not break the next in a multirun)."""
    try:
        import sys

        if "wandb" not in sys.modules:
            return
        import wandb

        if wandb.run is not None:
            log.info("closing the W&B run")
            wandb.finish()
    except Exception as e:  # noqa: BLE001 - never mask the task's own outcome
        log.warning("could not close W&B: %s", e)


def task_wrapper(fn: F) -> F:
    """Run a task, always logging its output dir and closing W&B, even when it fails."""

    @functools.wraps(fn)
    def wrapped(cfg: DictConfig, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(cfg, *args, **kwargs)
        except Exception:
            log.exception("task %s failed", fn.__name__)
            raise
        finally:
            out = OmegaConf.select(cfg, "paths.output_dir", throw_on_missing=False, default=None)
            log.info("output dir: %s", out)
            close_wandb()

    return wrapped  # type: ignore[return-value]


def _instantiate_group(cfg: Mapping | None, kind: str) -> list[Any]:
    from hydra.utils import instantiate

    out: list[Any] = []
    if not cfg:
        return out
    if not isinstance(cfg, (DictConfig, Mapping)):
        raise TypeError(f"{kind} config must be a mapping of name -> {{_target_: ...}}")
    for name, conf in cfg.items():
        if conf is None:  # a group entry switched off with `logger.wandb=null`
            continue
        if not isinstance(conf, (DictConfig, Mapping)) or "_target_" not in conf:
            raise ValueError(f"{kind}.{name} has no _target_; each entry needs one")
        log.info("instantiating %s.%s <%s>", kind, name, conf["_target_"])
        out.append(instantiate(conf))
    return out


def instantiate_callbacks(cfg: Mapping | None) -> list[Any]:
    return _instantiate_group(cfg, "callbacks")


def instantiate_loggers(cfg: Mapping | None) -> list[Any]:
    loggers = _instantiate_group(cfg, "logger")
    for lg in loggers:
        save_dir = getattr(lg, "save_dir", None)
        if save_dir:
            Path(save_dir).mkdir(parents=True, exist_ok=True)
    return loggers
