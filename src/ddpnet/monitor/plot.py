"""``--plot FILE.png``: the recorded series, rx/tx per interface and TCP retransmits."""

from __future__ import annotations

from pathlib import Path

from ddpnet.errors import ConfigError


def plot_series(cols: list[str], rows: list[list[float | None]], out: Path) -> None:
    if not rows:
        raise ConfigError("nothing recorded to plot", "let the monitor run for a few intervals")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = rows[0][0] or 0.0
    times = [(r[0] or t0) - t0 for r in rows]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1]})
    for i, col in enumerate(cols):
        if col.endswith(".rx_gbps") or col.endswith(".tx_gbps"):
            ys = [r[i] if r[i] is not None else float("nan") for r in rows]
            ax.plot(times, ys, label=col.replace("_gbps", ""))
    ax.set_ylabel("Gb/s")
    ax.set_title("ddpnet monitor")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize="small")
    if "tcp.retrans_per_s" in cols:
        j = cols.index("tcp.retrans_per_s")
        ax2.plot(times, [r[j] or 0.0 for r in rows], color="tab:red")
    ax2.set_ylabel("TCP retrans/s")
    ax2.set_xlabel("seconds")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=100)
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror}",
                          "choose a writable path for --plot") from None
    finally:
        plt.close(fig)
