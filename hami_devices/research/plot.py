"""The allocation-curve plot: allocated GPU share against arrived GPU requests, one line per policy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hami_devices.research.replay import ReplayResult


def plot_curves(results: Sequence[ReplayResult], path: str | Path, title: str = "") -> Path | None:
    """Write the plot; None when matplotlib (the ``[plot]`` extra) is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        ax.plot(
            100 * r.arrived,
            100 * r.allocated,
            label=f"{r.policy} (seed {r.seed}): {r.unallocated_gpu_pct:.2f}% unallocated",
        )
    ax.plot([0, 100], [0, 100], color="grey", linewidth=0.6, linestyle=":")
    ax.axvline(100, color="grey", linewidth=0.6, linestyle="--")
    ax.set_xlabel("arrived GPU requests (% of cluster GPU capacity)")
    ax.set_ylabel("allocated GPU share (%)")
    ax.set_title(title or "openb replay")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
