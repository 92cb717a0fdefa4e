"""The GPU checks ``make bench-gpu`` runs before it times anything (``gpu`` marker; skipped
without CUDA). ``SKIPDECODE_GPU_TEST_DEVICE=cpu`` runs the same checks on a CPU in float32 (the
recordings are then called instead of replayed): the dry run of the prepared GPU command.

On the GPU in bf16: whole-step graphs and sync-free rounds are really captured (a second call
records nothing); the whole-step path's greedy tokens equal the eager path's, the sync-free
lossless round's equal the whole-step full path's, and our full path's equal transformers'
``generate``; replay is refused after the weights move.

The rule for bf16 ties: two paths may order the same floating-point sums differently, so where
a row's tokens first differ, the reference's two best logits at that step must lie within
:data:`TIE` of each other (relative to the larger); such a row is a tie, counted and printed,
and compared no further. Any other difference fails.
"""

from __future__ import annotations

import os

import pytest
import torch

from skipdecode.core.engine import SkipDecoder
from skipdecode.core.options import CUDA_GRAPH_MODE
from skipdecode.models.shapes import build_random_model, random_prompts
from skipdecode.schedules import FullSchedule, build_schedule, linear_for_speedup

DEVICE = os.environ.get("SKIPDECODE_GPU_TEST_DEVICE", "cuda")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device"
    ),
]
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32
SHAPE = "smollm2-135m" if DEVICE == "cuda" else "tiny"
NEW = 24
TIE = 2.0**-6  # bf16 keeps 8 significant bits: a few roundings apart


@pytest.fixture(scope="module")
def paths():
    model = build_random_model(SHAPE, DTYPE, DEVICE)
    eager = SkipDecoder(model)
    step = SkipDecoder(model, compile=CUDA_GRAPH_MODE, compile_graph="step")
    ids, mask = random_prompts(4, 16, model.config.vocab_size, torch.device(DEVICE))
    return model, eager, step, ids, mask


def _ties(tokens: torch.Tensor, ref: torch.Tensor, ref_logits: torch.Tensor) -> int:
    """Rows whose tokens differ from ``ref``'s only from a bf16 tie on (see the module doc);
    fails on any other difference."""
    ties = 0
    for row in range(ref.shape[0]):
        differ = (tokens[row] != ref[row]).nonzero()
        if len(differ) == 0:
            continue
        g = int(differ[0])
        top = ref_logits[row, g].float().topk(2).values
        gap = float(top[0] - top[1])
        assert gap <= TIE * max(1.0, abs(float(top[0]))), (row, g, gap)
        ties += 1
    print(f"bf16 ties: {ties} of {ref.shape[0]} rows")
    return ties


def test_gpu_whole_step_graphs_are_recorded_once_and_equal_the_eager_path(paths):
    model, eager, step, ids, mask = paths
    assert step.compiled.recorder.cuda == (DEVICE == "cuda")
    for schedule in (FullSchedule(eager.num_layers), linear_for_speedup(eager.num_layers, 2, NEW)):
        ref = eager.generate(ids, schedule, NEW, mask, eos_token_id=[], return_logits=True)
        out = step.generate(ids, schedule, NEW, mask, eos_token_id=[])
        assert out.stats.graph == "step"
        _ties(out.generated_ids, ref.generated_ids, ref.step_logits)
    recorded = step.compiled.steps.recorded
    step.generate(ids, linear_for_speedup(eager.num_layers, 2, NEW), NEW, mask, eos_token_id=[])
    assert recorded > 0 and step.compiled.steps.recorded == recorded


def test_gpu_sync_free_rounds_are_recorded_once_and_equal_the_full_path(paths):
    model, eager, step, ids, mask = paths
    L = eager.num_layers
    ref = eager.generate(ids, FullSchedule(L), NEW, mask, eos_token_id=[], return_logits=True)
    draft = {"name": "budgets", "budgets": [max(2, L // 3)], "warmup_layers": 1}
    lossless = build_schedule({"name": "speculative", "draft": draft, "k": 2}, L, NEW)
    out = step.generate(ids, lossless, NEW, mask, eos_token_id=[])
    assert out.stats.graph == "round"
    _ties(out.generated_ids, ref.generated_ids, ref.step_logits)
    recorded = step.compiled.rounds.recorded
    step.generate(ids, lossless, NEW, mask, eos_token_id=[])
    assert recorded > 0 and step.compiled.rounds.recorded == recorded


def test_gpu_our_full_path_equals_transformers_generate(paths):
    model, eager, step, ids, mask = paths
    out = step.generate(ids, FullSchedule(eager.num_layers), NEW, mask, eos_token_id=[])
    with torch.no_grad():
        hf = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW,
            do_sample=False, output_scores=True, return_dict_in_generate=True,
            pad_token_id=0, eos_token_id=None,
        )  # fmt: skip
    tokens = hf.sequences[:, ids.shape[1] :]
    scores = torch.stack(hf.scores, 1)
    _ties(out.generated_ids, tokens, scores)


def test_gpu_replay_is_refused_after_the_weights_move(paths):
    model = build_random_model("tiny", DTYPE, DEVICE)
    step = SkipDecoder(model, compile=CUDA_GRAPH_MODE, compile_graph="step")
    ids, mask = random_prompts(2, 8, model.config.vocab_size, torch.device(DEVICE))
    step.generate(ids, FullSchedule(step.num_layers), 4, mask, eos_token_id=[])
    weight = next(model.parameters())
    weight.data = weight.data.clone()
    with pytest.raises(RuntimeError, match="not at the addresses its whole-step graphs"):
        step.generate(ids, FullSchedule(step.num_layers), 4, mask, eos_token_id=[])
