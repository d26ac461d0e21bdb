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

SECTIONS = ("summary", "verdict", "error-vs-sigma", "marginals", "correlations", "metrics")


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
        # one filled step artist per histogram: 30 bar patches each made the plot seconds slower
        for values, label, color in (
            (real, "real", "tab:blue"),
            (synthetic, "synthetic", "tab:orange"),
        ):
            density = np.histogram(values[:, i], bins=bins, density=True)[0]
            ax.stairs(density, bins, fill=True, alpha=0.5, label=label, color=color)
        ax.set_title(columns[i], fontsize=7)
        ax.tick_params(labelsize=6)
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    return _png(fig)


def correlation_plot(real: np.ndarray, synthetic: np.ndarray) -> str:
    """Correlation heatmaps: real, synthetic and their difference."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    real_corr, synth_corr = correlation_matrix(real), correlation_matrix(synthetic)
    for ax, data, title in zip(
        axes,
        (real_corr, synth_corr, synth_corr - real_corr),
        ("real", "synthetic", "synthetic - real"),
        strict=False,
    ):
        im = ax.imshow(data, vmin=-1, vmax=1, cmap="RdBu_r")
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
        ax.plot(
            [float(s) for s in reference],
            list(reference.values()),
            "k--",
            label="paper, WDBC, worst",
        )
    ax.set_xlabel("sigma")
    ax.set_ylabel("error")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    return _png(fig)


def write_report(
    out_dir: Path,
    metrics: dict[str, Any],
    real: np.ndarray,
    synthetic: np.ndarray,
    columns: list[str],
    reference: dict[str, float] | None = None,
) -> Path:
    """Write ``metrics.json`` and ``report.html`` into ``out_dir``; returns the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=1))
    images = {
        "error-vs-sigma": error_plot(metrics["paper_protocol"], reference),
        "marginals": marginal_plot(real, synthetic, columns),
        "correlations": correlation_plot(real, synthetic),
    }
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(_fmt(v))}</td></tr>"
        for k, v in _flatten(metrics).items()
    )
    verdict = _verdict_html(metrics.get("verdict"))
    warnings = "".join(
        f'<p class="warn" id="privacy-warning"><b>Privacy warning:</b> {html.escape(w)}</p>'
        for w in metrics.get("release", {}).get("warnings", [])
    )
    body = f"""<!doctype html><html><head><meta charset="utf-8">
<title>dpsmooth-spark evaluation</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:auto}}td{{padding:2px
8px;font-size:13px}}
.warn{{background:#fee;padding:8px;border:1px solid #c66}}img{{max-width:100%}}
.better{{background:#dfd}}.worse{{background:#fdd}}.between,.equal{{background:#ffd}}
th{{text-align:left;font-size:13px;padding:2px 8px}}</style></head><body>
<section id="summary"><h1>Evaluation of a synthetic release</h1>
<p class="warn">This report is computed from the real data and is <b>not</b> differentially
private. Keep it with the data owner; publish only the release itself.</p>
<p>{html.escape(metrics.get("release", {}).get("description", ""))}</p>{warnings}</section>
<section id="verdict"><h2>How good is this release</h2>{verdict}</section>
<section id="error-vs-sigma"><h2>Error vs sigma (paper's protocol)</h2>
<img alt="error vs sigma" src="data:image/png;base64,{images["error-vs-sigma"]}"></section>
<section id="marginals"><h2>Marginals: real vs synthetic (scaled units)</h2>
<img alt="marginals" src="data:image/png;base64,{images["marginals"]}"></section>
<section id="correlations"><h2>Correlations</h2>
<img alt="correlations" src="data:image/png;base64,{images["correlations"]}"></section>
<section id="metrics"><h2>All metrics</h2><details><summary>show</summary><table>{rows}</table>
</details></section>
</body></html>"""
    path = out_dir / "report.html"
    path.write_text(body)
    return path


def _verdict_html(table: dict[str, Any] | None) -> str:
    if not table:
        return "<p>No verdict (no baselines were computed).</p>"
    head = (
        "<tr><th>metric</th><th>release</th><th>independent columns</th><th>uniform</th>"
        "<th>verdict</th></tr>"
    )
    body = "".join(
        f'<tr class="{row["verdict"]}"><td>{html.escape(row["description"])}</td>'
        f"<td>{_fmt(row['release'])}</td><td>{_fmt(row['independent'])}</td>"
        f"<td>{_fmt(row['uniform'])}</td><td><b>{html.escape(row['verdict'])}</b></td></tr>"
        for row in table["rows"]
    )
    notes = "".join(
        f"<li>{html.escape(k)}: {html.escape(v)}</li>" for k, v in table["baselines"].items()
    )
    return (
        f"<p><b>{html.escape(table['headline'])}.</b></p><table>{head}{body}</table>"
        f"<p>Baselines:</p><ul>{notes}</ul>"
    )


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
