"""The evaluation report: metrics from real and synthetic rows, PNG plots, ``report.html``.

The report is self-contained (plots inlined as base64 PNG) and needs no network. It describes
the real data: it is **not** differentially private and is for the data owner only.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from dpsmooth_spark.evaluation.metrics import correlation_matrix

SECTIONS = ("summary", "metrics", "error-vs-sigma", "marginals", "correlations")


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def marginal_plot(real: np.ndarray, synthetic: np.ndarray, columns: list[str]) -> str:
    """Small multiples: real vs synthetic histogram of each column (scaled units)."""
    import matplotlib.pyplot as plt

    d = len(columns)
    cols = min(6, d)
    rows = int(np.ceil(d / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 1.9 * rows), squeeze=False)
    bins = np.linspace(-1, 1, 31)
    for i, ax in enumerate(axes.ravel()):
        if i >= d:
            ax.axis("off")
            continue
        ax.hist(real[:, i], bins=bins, density=True, alpha=0.5, label="real", color="tab:blue")
        ax.hist(synthetic[:, i], bins=bins, density=True, alpha=0.5, label="synthetic", color="tab:orange")
        ax.set_title(columns[i], fontsize=7)
        ax.tick_params(labelsize=6)
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    return _png(fig)


def correlation_plot(real: np.ndarray, synthetic: np.ndarray) -> str:
    """Correlation heatmaps side by side."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for ax, data, title in zip(axes, (real, synthetic), ("real", "synthetic")):
        im = ax.imshow(correlation_matrix(data), vmin=-1, vmax=1, cmap="RdBu_r")
        ax.set_title(f"correlations: {title}")
    fig.colorbar(im, ax=axes, shrink=0.8)
    return _png(fig)


def error_plot(protocol: dict[str, dict[str, float]], reference: dict[str, float] | None) -> str:
    """Worst-case and mean relative error vs sigma (the paper's protocol)."""
    import matplotlib.pyplot as plt

    sigmas = [float(s) for s in protocol]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(sigmas, [protocol[s]["worst_rel"] for s in protocol], "o-", label="worst-case relative")
    ax.plot(sigmas, [protocol[s]["mean_rel"] for s in protocol], "s-", label="mean relative")
    if reference:
        ax.plot([float(s) for s in reference], list(reference.values()), "k--", label="paper, WDBC, worst")
    ax.set_xlabel("sigma")
    ax.set_ylabel("error")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    return _png(fig)


def write_report(out_dir: Path, metrics: dict[str, Any], real: np.ndarray, synthetic: np.ndarray,
                 columns: list[str], reference: dict[str, float] | None = None) -> Path:
    """Write ``metrics.json`` and ``report.html`` into ``out_dir``; returns the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=1))
    images = {
        "error-vs-sigma": error_plot(metrics["paper_protocol"], reference),
        "marginals": marginal_plot(real, synthetic, columns),
        "correlations": correlation_plot(real, synthetic),
    }
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(_fmt(v))}</td></tr>"
                   for k, v in _flatten(metrics).items())
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>dpsmooth-spark evaluation</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:auto}}td{{padding:2px 8px;font-size:13px}}
.warn{{background:#fee;padding:8px;border:1px solid #c66}}img{{max-width:100%}}</style></head><body>
<section id="summary"><h1>Evaluation of a synthetic release</h1>
<p class="warn">This report is computed from the real data and is <b>not</b> differentially
private. Keep it with the data owner; publish only the release itself.</p>
<p>{html.escape(metrics.get("release", {}).get("description", ""))}</p></section>
<section id="metrics"><h2>Metrics</h2><table>{rows}</table></section>
<section id="error-vs-sigma"><h2>Error vs sigma (paper's protocol)</h2>
<img alt="error vs sigma" src="data:image/png;base64,{images["error-vs-sigma"]}"></section>
<section id="marginals"><h2>Marginals: real vs synthetic (scaled units)</h2>
<img alt="marginals" src="data:image/png;base64,{images["marginals"]}"></section>
<section id="correlations"><h2>Correlations</h2>
<img alt="correlations" src="data:image/png;base64,{images["correlations"]}"></section>
</body></html>"""
    path = out_dir / "report.html"
    path.write_text(body)
    return path


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        elif not isinstance(value, list):
            out[name] = value
    return out


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
