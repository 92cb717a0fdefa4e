"""Data layer: task registry and loaders, the synthetic dataset, tokenizer training, batching.

Plain Python: callers pass configuration values as arguments.
"""

from .collate import (
    EncodedExample,
    TrainCollator,
    TruncationReport,
    encode_example,
    encode_examples,
    encode_prompt,
    left_pad,
)
from .datasets import (
    SPLITS,
    TASKS,
    Example,
    TaskSpec,
    available_datasets,
    dataset_options,
    get_task,
    group_by_source,
    load_split,
    median_target_length,
    target_lengths,
)
from .errors import (
    DataConfigError,
    DataNotFoundError,
    EmptySplitError,
    MissingColumnsError,
    TargetTooLongError,
)
from .tokenizer import get_or_train_tokenizer, train_bpe_tokenizer

__all__ = [
    "SPLITS",
    "TASKS",
    "DataConfigError",
    "DataNotFoundError",
    "EmptySplitError",
    "EncodedExample",
    "left_pad",
    "Example",
    "MissingColumnsError",
    "TargetTooLongError",
    "TaskSpec",
    "TrainCollator",
    "TruncationReport",
    "available_datasets",
    "dataset_options",
    "encode_example",
    "encode_examples",
    "encode_prompt",
    "get_or_train_tokenizer",
    "get_task",
    "group_by_source",
    "load_split",
    "median_target_length",
    "target_lengths",
    "train_bpe_tokenizer",
]
