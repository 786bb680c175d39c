#!/usr/bin/env python3
"""Draws the Grafana dashboard's panels as a PNG from a real Prometheus: each panel's queries
evaluated over the run (`query_range`), laid out by the dashboard's own gridPos, titles, legends
and units. Grafana itself cannot be built or pulled on the machines this project runs on, so
this is the dashboard's data as Grafana would plot it, not Grafana's pixels.

Usage: dashboard_png.py --prometheus URL --dashboard FILE --start UNIX --end UNIX --out PNG
"""

import argparse
import json
import math
import sys
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROW_HEIGHT_IN = 0.42  # one gridPos unit (Grafana: 30 px)
WIDTH_IN = 16.0


def query_range(prom, expr, start, end, step):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prom}/api/v1/query_range?{params}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def legend(fmt, metric):
    # A zone key joins region and zone with a NUL, as upstream's GetZoneKey does.
    metric = {k: v.replace("\x00", ":") for k, v in metric.items()}
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in sorted(metric.items()) if k != "__name__") or "value"
    out = fmt
    for k, v in metric.items():
        out = out.replace("{{" + k + "}}", v)
    while "{{" in out and "}}" in out:
        a, b = out.index("{{"), out.index("}}")
        out = out[:a] + out[b + 2 :]
    return out.strip() or "value"


def scale(unit, v):
    return v * 100.0 if unit == "percentunit" else v


def unit_label(unit):
    return {"percent": "%", "percentunit": "%", "s": "seconds", "ops": "per second",
            "reqps": "requests/s", "short": ""}.get(unit or "", unit or "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--start", type=float, required=True)
    ap.add_argument("--end", type=float, required=True)
    ap.add_argument("--step", type=float, default=5)
    ap.add_argument("--out", required=True)
    ap.add_argument("--subtitle", default="")
    a = ap.parse_args()
    dash = json.load(open(a.dashboard))
    panels = dash["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig = plt.figure(figsize=(WIDTH_IN, rows * ROW_HEIGHT_IN + 0.8), facecolor="#111217")
    fig.suptitle(f'{dash["title"]}  {a.subtitle}', color="#d8d9da", x=0.01, y=0.995, ha="left", fontsize=13)
    total_h = rows * ROW_HEIGHT_IN + 0.8
    empty = []
    for p in panels:
        g = p["gridPos"]
        left = g["x"] / 24 + 0.004
        width = g["w"] / 24 - 0.008
        top = 1 - (0.6 + g["y"] * ROW_HEIGHT_IN) / total_h
        height = g["h"] * ROW_HEIGHT_IN / total_h
        if p["type"] == "row":
            fig.text(left, top - height * 0.2, p["title"], color="#d8d9da", fontsize=12, fontweight="bold", va="top")
            continue
        ax = fig.add_axes([left + 0.025, top - height + 0.012, width - 0.03, height - 0.035])
        ax.set_facecolor("#181b1f")
        for s in ax.spines.values():
            s.set_color("#2c3235")
        ax.tick_params(colors="#9fa7b3", labelsize=7)
        ax.set_title(p["title"], color="#d8d9da", fontsize=9, loc="left")
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        series = []
        for t in p.get("targets", []):
            expr = t["expr"].replace("$job", ".*").replace("${job}", ".*")
            for r in query_range(a.prometheus, expr, a.start, a.end, a.step):
                xs = [float(v[0]) - a.start for v in r["values"]]
                ys = [scale(unit, float(v[1])) for v in r["values"]]
                ys = [y if math.isfinite(y) else float("nan") for y in ys]
                series.append((legend(t.get("legendFormat"), r["metric"]), xs, ys))
        if not series:
            empty.append(p["title"])
            ax.text(0.5, 0.5, "No data", color="#9fa7b3", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        if p["type"] == "stat":
            name, _, ys = series[0]
            last = next((y for y in reversed(ys) if math.isfinite(y)), float("nan"))
            text = f"{last:.0f}" if unit != "s" else f"{last / 86400:.0f} days" if last > 86400 else f"{last:.0f} s"
            ax.text(0.5, 0.5, text, color="#73bf69", ha="center", va="center", fontsize=26, transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        for name, xs, ys in series[:8]:
            ax.plot(xs, ys, linewidth=1.2, label=name)
        ax.set_xlabel("seconds into the run", color="#9fa7b3", fontsize=7)
        if unit_label(unit):
            ax.set_ylabel(unit_label(unit), color="#9fa7b3", fontsize=7)
        ax.grid(color="#2c3235", linewidth=0.5)
        leg = ax.legend(fontsize=6, loc="upper left", facecolor="#181b1f", edgecolor="#2c3235")
        for t in leg.get_texts():
            t.set_color("#d8d9da")
    fig.savefig(a.out, dpi=90, facecolor=fig.get_facecolor())
    print(json.dumps({"out": a.out, "panels": len([p for p in panels if p["type"] != "row"]), "no_data": empty}))


if __name__ == "__main__":
    sys.exit(main())
