"""Each queue's usage against its guarantee through a replay (device-cores, share of the cluster)."""

from __future__ import annotations

from pathlib import Path

from hami_devices.queueing.replay import CORES, ReplayReport


def plot_usage(report: ReplayReport, capacity_cores: float, path: str | Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    names = list(report.usage)
    fig, axes = plt.subplots(len(names) + 1, 1, figsize=(8, 2.2 * (len(names) + 1)), sharex=True, squeeze=False)
    hours = [t / 3600.0 for t in report.times]
    total = [sum(report.usage[n][i] for n in names) for i in range(len(report.times))]
    for ax, name in zip(axes[:, 0], names, strict=False):
        share = [100 * u for u in report.usage[name]]
        ax.step(hours, share, where="post", label=f"{name} usage")
        guarantee = report.groups[name].guarantee.get("device-cores") if name in report.groups else None
        if guarantee:
            ax.axhline(
                100 * guarantee / capacity_cores, color="tab:red", linestyle="--", linewidth=1, label="guarantee"
            )
        ax.set_ylabel("% of device-cores")
        ax.legend(fontsize=8, loc="upper right")
        ax.grid(alpha=0.3)
    ax = axes[-1, 0]
    ax.step(hours, [100 * t for t in total], where="post", color="black", label="cluster")
    ax.set_ylabel("% granted")
    ax.set_xlabel("time (h)")
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    axes[0, 0].set_title(title or "queue usage against guarantee")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


__all__ = ["CORES", "plot_usage"]
