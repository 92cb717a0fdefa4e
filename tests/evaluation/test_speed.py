"""The measured speedups a table publishes from a record (``published_speedups``), against the
audit's own twin (``recompute.speeds.published``): the same figures for every kind of record."""

from __future__ import annotations

import pytest

from skipdecode.evaluation.speed import WITHDRAWN_E2E, published_speedups
from skipdecode.experiments.recompute.speeds import published

BATCH = {
    "timed": True,
    "decode": [1.0, 2.0, 3.0],
    "base_decode": [4.0, 6.0, 5.0],
    "prefill": [1.0, 1.0, 1.0],
    "base_prefill": [2.0, 2.0, 2.0],
}
OLDER = {  # written before raw timings were kept
    "measured_speedup_decode": 1.95,  # the summed medians it was written with
    "measured_speedup_e2e": 1.32,  # each side's own prefill: not the one definition
    "baseline": {"schedule": "full"},
    "timing": {"measured_speedup_decode_per_repeat": [1.82, 1.97, 1.89]},
}
KINDS = {
    "raw timings": {"raw": {"batches": [BATCH]}, "baseline": {"schedule": "full"}},
    "own baseline, raw without a timed batch": {
        "raw": {"batches": [{**BATCH, "timed": False}]},
        "baseline": {"schedule": "self"},
    },
    "own baseline, no raw": {"baseline": {"schedule": "self"}, "measured_speedup_e2e": 1.0},
    "rounds only": OLDER,
    "neither": {**OLDER, "timing": {}},
    "a round missing": {**OLDER, "timing": {"measured_speedup_decode_per_repeat": [1.8, None]}},
    "untimed": {"baseline": None, "measured_speedup_decode": None},
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_tables_and_the_audit_publish_the_same_speedups(kind):
    speed = KINDS[kind]
    mine = published_speedups(speed)
    mine.pop("speedup_source")
    assert mine == pytest.approx(published({"speed": speed}))


def test_a_record_without_raw_timings_publishes_its_rounds_median_and_no_end_to_end_speedup():
    assert published_speedups(OLDER) == {
        "measured_speedup_decode": 1.89,
        "measured_speedup_e2e": None,
        "speedup_source": WITHDRAWN_E2E,
    }
    own = published_speedups(KINDS["own baseline, no raw"])
    assert own["measured_speedup_decode"] == own["measured_speedup_e2e"] == 1.0
    for kind in ("neither", "a round missing"):  # nothing recomputes: nothing published
        assert published_speedups(KINDS[kind])["measured_speedup_decode"] is None
    raw = published_speedups(KINDS["raw timings"])
    assert raw["measured_speedup_decode"] == 3.0  # rounds 4/1, 6/2, 5/3
    assert raw["measured_speedup_e2e"] == pytest.approx(7.5 / 3.5)  # prefill pooled: 1.5
