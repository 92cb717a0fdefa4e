"""The E2E NLG Challenge's own metric suite: BLEU, NIST, METEOR, ROUGE-L and CIDEr.

Computed as the challenge's official script computes them (tuetschek/e2e-metrics,
``measure_scores.py -p``): BLEU and NIST by its Python mteval (:mod:`.mteval`, case-insensitive,
mteval-v13a tokenisation), METEOR 1.5, ROUGE-L and CIDEr by the MS-COCO caption evaluation
(pycocoevalcap on PyPI, the package the script bundles) on text its Stanford PTB tokenizer
lowercased and stripped of punctuation. The values equal the script's to the last digit
(``tests/evaluation/test_e2e_suite.py`` compares them with its output on committed generations).

METEOR and the tokenizer are Java programs: without ``java`` on the PATH the suite raises a
:class:`MetricSettingError` that says so. Scales as the E2E literature prints them: BLEU, METEOR
and ROUGE-L x100, NIST and CIDEr as they are. This ROUGE-L (the COCO one: longest common
subsequence F-measure with beta 1.2, the best reference per output, on PTB tokens) is not the
``rouge-score`` ROUGE-L of the other tables.

Scoring several systems on one test set shares the work that does not depend on the system:
the references are tokenized once, the hypotheses of every system in one tokenizer run, and one
METEOR process (its paraphrase table takes most of its start-up) scores them all.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from .mteval import BLEUScore, NISTScore, mteval_tokenize
from .references import MetricSettingError, normalize_references

__all__ = ["E2E_METRICS", "e2e_suite", "e2e_suite_many", "require_java"]

#: (key, label) of the suite's scores, in the order the literature prints them.
E2E_METRICS = (
    ("bleu", "BLEU"),
    ("nist", "NIST"),
    ("meteor", "METEOR"),
    ("rouge_l", "ROUGE-L"),
    ("cider", "CIDEr"),
)
SOURCE = "tuetschek/e2e-metrics measure_scores.py -p (mteval BLEU/NIST) + pycocoevalcap 1.2"


def require_java(needed_by: str = "eval.metrics.e2e=true") -> str:
    """The ``java`` executable, or a :class:`MetricSettingError` naming what needs it."""
    java = shutil.which("java")
    if java is None:
        raise MetricSettingError(
            f"{needed_by} needs Java (METEOR 1.5 and the PTB tokenizer of E2E's metric suite "
            "are Java programs) and no `java` is on the PATH: install a Java runtime (Debian: "
            "apt install default-jre-headless), or leave the suite off (eval.metrics.e2e=false)"
        )
    return java


def e2e_suite(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The suite for one system: ``{bleu, nist, meteor, rouge_l, cider, n, settings}``."""
    return e2e_suite_many({"system": hypotheses}, references)["system"]


def e2e_suite_many(
    systems: Mapping[str, Sequence[str]], references: Sequence[Sequence[str]]
) -> dict[str, dict[str, Any]]:
    """The suite for several systems' outputs on the same inputs (``references``), by name."""
    require_java()
    refs: list[list[str]] | None = None
    hyps: dict[str, list[str]] = {}
    for name, outputs in systems.items():
        h, r = normalize_references(outputs, references, where=f"e2e suite ({name})")
        hyps[name], refs = h, r
    if refs is None:
        return {}
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.meteor.meteor import Meteor
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    tokenizer = PTBTokenizer()
    gts = tokenizer.tokenize({i: [{"caption": ref} for ref in rs] for i, rs in enumerate(refs)})
    ids = [(name, i) for name in hyps for i in range(len(refs))]
    tokenized = tokenizer.tokenize({k: [{"caption": hyps[k[0]][k[1]]}] for k in ids})
    ref_tokens = [[mteval_tokenize(r) for r in rs] for rs in refs]  # once for every system
    meteor = Meteor()
    out: dict[str, dict[str, Any]] = {}
    try:
        for name, outputs in hyps.items():
            # an output the tokenizer returns no line for (an empty last line) is empty
            res = {i: tokenized.get((name, i), [""]) for i in range(len(refs))}
            bleu, nist = BLEUScore(), NISTScore()
            for hyp, rs in zip(outputs, ref_tokens, strict=True):
                bleu.append(hyp, rs)
                nist.append(hyp, rs)
            out[name] = {
                "bleu": 100 * bleu.score(),
                "nist": nist.score(),
                "meteor": 100 * float(meteor.compute_score(gts, res)[0]),
                "rouge_l": 100 * float(Rouge().compute_score(gts, res)[0]),
                "cider": float(Cider().compute_score(gts, res)[0]),
                "n": len(outputs),
                "settings": {"source": SOURCE, "scale": "BLEU, METEOR, ROUGE-L x100"},
            }
    finally:
        _close(meteor)
    return out


def _close(meteor: Any) -> None:
    """Stop the METEOR process now rather than whenever the object is collected."""
    proc = meteor.meteor_p
    if proc.poll() is None:
        proc.stdin.close()
        proc.kill()
        proc.wait()
