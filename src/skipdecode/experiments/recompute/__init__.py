"""``make audit``: recompute published numbers from the records' raw fields, with arithmetic of
its own (never the page writers' functions), and check each record's provenance.

- :mod:`.provenance`: a record from a clean commit passes; one with its whole diff passes when
  that diff applies to its commit (``git apply --check`` on a temporary index); one whose diff is
  partial or missing passes only while ``results/PROVENANCE.md`` lists it as such.
- :mod:`.speeds`: an evaluation record that keeps its raw timings (``speed.raw``) has its
  measured speedups recomputed from them; older records are counted as not recomputable.
- :mod:`.tables`: every results folder's ``cells.csv`` against its records, and ``results.csv``
  (means over seeds and their t-intervals) against ``cells.csv``.
- :mod:`.summaries`: ``summaries.csv`` and ``one_model.csv`` from the cells' generations (ROUGE
  counted here in SciTLDR's two conventions, means and t-intervals over seeds, the differences,
  the paired bootstrap of the per-input metrics, what the intervals decide).
- :mod:`.scored`: the cells scored from their generations, and the paired bootstrap, for the
  two checks below.
- :mod:`.deltas`: every ``results.csv``'s differences from full from the cells' generations
  (BLEU counted here, ROUGE-L's per-type max, the paired bootstrap, the t-interval over seeds),
  and every ``results.md`` against its table at the printed digits.
- :mod:`.budget`: every fine-tuning-budget page (``budget.csv``, ``budget.md``) from its
  folder's ``results.csv``.
- :mod:`.bench`: the decode benchmarks' speedups and floor multiples from their ms per step, and
  every cell of the GPU page at its printed digits.
- :mod:`.training`: the GPU training page's memory plan, peaks and losses from each run's
  ``metrics.json`` and its own log.

:mod:`.cli` runs them all and fails on any difference beyond the stated tolerance.
"""
