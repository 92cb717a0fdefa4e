"""Quality against speedup: one PNG per dataset, one line per model/method.

Each figure has a row per speedup kind (theoretical, measured decode) and a column per metric
(BLEU, ROUGE-L, BERT-F). Points are results rows (means over seeds); error bars are the 95%
seed intervals where a row has two or more seeds. Only finished rows (status ``ok``) are drawn;
the tables list the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .table import num as _f

__all__ = ["METRICS", "SPEEDUPS", "plot_sweep", "plot_dataset", "save_figure"]


def save_figure(fig: Any, path: Path, dpi: int = 120) -> Path:
    """Write ``fig`` to ``path`` whole (a temporary sibling, then renamed) and close it."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    try:
        fig.savefig(tmp, dpi=dpi)
        tmp.replace(path)
    finally:  # a failed save leaves neither a half-written plot nor its temporary
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path


METRICS: tuple[tuple[str, str], ...] = (
    ("bleu", "BLEU"),
    ("rougeL", "ROUGE-L"),
    ("bertscore_f1", "BERTScore F1"),
)
SPEEDUPS: tuple[tuple[str, str], ...] = (
    ("theoretical_speedup", "theoretical speedup (L / layers per token)"),
    ("measured_speedup_decode", "measured decode speedup vs full"),
)


def _line_label(row: Mapping[str, Any]) -> str:
    method = row.get("method") or "skipdecode"
    return f"{row.get('model')} ({method})"


def _point(
    row: Mapping[str, Any], sx: str, metric: str
) -> tuple[float | None, float | None, float | None, float | None]:
    """(speedup, mean, ci low, ci high) of a results row; (None, ...) when not drawable."""
    x, y = _f(row.get(sx)), _f(row.get(f"{metric}_mean"))
    if x is None or y is None:
        return None, None, None, None
    return x, y, _f(row.get(f"{metric}_ci95_low")), _f(row.get(f"{metric}_ci95_high"))


def _errors(points: Sequence[tuple]) -> list[list[float]]:
    """matplotlib's asymmetric ``yerr`` from (x, y, low, high); no bar where there is no CI."""
    below = [y - low if low is not None else 0.0 for _, y, low, _ in points]
    above = [high - y if high is not None else 0.0 for _, y, _, high in points]
    return [below, above]


def plot_dataset(rows: Sequence[Mapping[str, Any]], dataset: str, out: Path) -> Path:
    """Draw one dataset's results rows into ``out`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [m for m in METRICS if any(_f(r.get(f"{m[0]}_mean")) is not None for r in rows)] or [
        METRICS[0]
    ]
    # a speedup row only where some row has that speedup (no timing: no measured row)
    speedups = [s for s in SPEEDUPS if any(_f(r.get(s[0])) is not None for r in rows)] or [
        SPEEDUPS[0]
    ]
    fig, axes = plt.subplots(
        len(speedups),
        len(metrics),
        figsize=(4.2 * len(metrics), 3.4 * len(speedups)),
        squeeze=False,
        layout="constrained",
    )
    # One line per model/method; each starts from that model's full-schedule baseline (1x),
    # which is also drawn on its own as a star.
    baselines = [r for r in rows if r.get("method") == "full"]
    lines: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("method") != "full":
            lines.setdefault(_line_label(row), []).append(row)
    for pts in lines.values():
        model = pts[0].get("model")
        pts.extend(b for b in baselines if b.get("model") == model)
    for i, (sx, sx_label) in enumerate(speedups):
        for j, (metric, m_label) in enumerate(metrics):
            ax = axes[i][j]
            for label, pts in sorted(lines.items()):
                xy = sorted(
                    _point(p, sx, metric) for p in pts if _point(p, sx, metric)[0] is not None
                )
                if xy:
                    ax.errorbar(
                        [p[0] for p in xy],
                        [p[1] for p in xy],
                        yerr=_errors(xy),
                        marker="o",
                        capsize=3,
                        label=label,
                    )
            for base in baselines:
                x, y, low, high = _point(base, sx, metric)
                if x is not None:
                    ax.errorbar(
                        [x],
                        [y],
                        yerr=_errors([(x, y, low, high)]),
                        marker="*",
                        markersize=12,
                        color="black",
                        linestyle="none",
                        capsize=3,
                        label=_line_label(base) if (i, j) == (0, 0) else None,
                    )
            ax.set_xlabel(sx_label, fontsize=8)
            ax.set_ylabel(m_label)
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if lines:  # below the panels, where it hides no point
        fig.legend(
            handles, labels, loc="outside lower center", ncol=min(4, len(labels)), fontsize=8
        )
    fig.suptitle(f"{dataset}: quality vs speedup")
    return save_figure(fig, out, dpi=110)


def plot_sweep(rows: Sequence[Mapping[str, Any]], out_dir: str | Path) -> list[Path]:
    """One ``quality_vs_speedup_<dataset>.png`` per dataset with at least one finished row."""
    out_dir = Path(out_dir)
    done = [r for r in rows if r.get("status") == "ok"]
    paths = []
    for dataset in sorted({str(r.get("dataset")) for r in done}):
        subset = [r for r in done if str(r.get("dataset")) == dataset]
        paths.append(plot_dataset(subset, dataset, out_dir / f"quality_vs_speedup_{dataset}.png"))
    return paths
