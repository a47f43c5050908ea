"""The benchmark's report: a plain-text table of every row and exponent, and the HTML figure page.

Book: "What it costs" (chapters/11_what_it_costs.ipynb), whose figures are
drawn by the same ``relpos_core.figures.bench`` code as the page written here.
"""
from __future__ import annotations


from relpos_core.bench import stats as bench_stats
from relpos_core.bench.presets import SCHEMA
from relpos_core.budget import format_bytes

__all__ = ["format_table", "figure_page"]


def _fmt_bytes(n):
    return "-" if n is None else format_bytes(n)


def format_table(result: dict) -> str:
    """Plain-text table of every row and the growth exponents (all from this one run)."""
    from relpos_core.bench.peers.run import SCHEMA as PEERS_SCHEMA, format_peers

    if result.get("schema") == PEERS_SCHEMA:
        return format_peers(result)
    head = (f"{'L':>6} {'path':<52} {'status':<7} {'ms':>9} {'spread':>6} {'x sdpa0':>8} {'x flex0':>8} "
            f"{'x best':>7} {'peak':>10} {'/analytic':>9} {'sdpa':<6}")
    lines = [head, "-" * len(head)]

    def num(v, f="{:.2f}"):
        return "-" if v is None else f.format(v)

    for r in sorted(result["rows"], key=lambda r: (r["mode"], r["scheme"], r["form"], r["backend"],
                                                   r["causal"], str(r["block_skipping"]), r["L"])):
        spread = r.get("time_ms", {}).get("spread")
        flag = "*" if r.get("noisy") else " "
        lines.append(f"{r['L']:>6} {r['label'][:52]:<52} {r['status']:<7} {num(r.get('ms'), '{:.3f}'):>9}"
                     f"{flag}{num(spread):>5} {num(r.get('x_sdpa0')):>8} {num(r.get('x_flex0')):>8} "
                     f"{num(r.get('x_best') if r['mode'] != 'module' else r.get('x_hf')):>7} "
                     f"{_fmt_bytes(r.get('peak_bytes')):>10} {num(r.get('peak_over_analytic'), '{:.3f}'):>9} "
                     f"{str(r.get('sdpa_backend') or '-'):<6}")
        if r["status"] != "ok":
            lines.append(f"{'':>6}   -> {r['reason'][:200]}")
    lines.append("x sdpa0 / x flex0: time over SDPA / FlexAttention with no bias (same L, causal setting, mode); "
                 "x best: over the scheme's fastest path (module rows: over the Hugging Face module); * noisy")
    lines.append("")
    lines.append(f"{'growth exponent (log-log slope vs L)':<60} {'time':>14} {'peak memory':>14} {'n':>3}")
    by = {}
    for f in result["fits"]:
        by.setdefault(bench_stats.series_key(f), {})[f["quantity"]] = f
    for key, fs in by.items():
        t, m = fs.get("time"), fs.get("peak_bytes")
        label = next(r["label"] for r in result["rows"] if bench_stats.series_key(r) == key)

        def cell(f):
            if f is None:
                return "-"
            return f"{f['slope']:.2f}" + (f" +- {f['stderr']:.2f}" if f["stderr"] is not None else "")
        lines.append(f"{label[:60]:<60} {cell(t):>14} {cell(m):>14} {(t or m)['n']:>3}")
    s = result["summary"]
    lines.append("")
    lines.append("worst measured peak / analytic per backend: " + ", ".join(
        f"{b} {w['ratio']:.3f} ({w['label']}, L={w['L']})" for b, w in s["worst_peak_over_analytic"].items()))
    lines.append(f"rows: {s['rows']}, noisy: {s['noisy_rows']}; wall {s['wall_s']:.0f} s (first calls "
                 f"{s['first_calls_wall_s']:.0f} s, of which FlexAttention compiles {s['flex_compile_wall_s']:.0f} s), "
                 f"CPU {s['cpu_s']:.0f} s")
    return "\n".join(lines)


def figure_page(result: dict) -> str | None:
    """One HTML page with the per-scheme figures and the exponents (None without plotly or for a
    peers run, which has no figure page yet)."""
    if result.get("schema") != SCHEMA:
        return None
    try:
        import plotly  # noqa: F401
    except ImportError:
        return None
    from relpos_core.figures import bench as bench_figures

    return bench_figures.report_html(result)
