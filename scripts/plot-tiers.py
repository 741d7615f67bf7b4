#!/usr/bin/env python3
"""Plots of `strata bench tiers --save FILE` (BENCHMARKS.md, "Tiering (issue 5)").

Usage: scripts/plot-tiers.py bench/results/tiers.json [OUT_DIR]   (default OUT_DIR: next to the JSON)

Writes tiers-speedup.png (VPIC write / BD-CATS read per number of tiers, with the
tmpfs and disk references), tiers-placement.png (placement engines: put time,
bytes per tier, get throughput), tiers-readahead.png and tiers-organizer.png —
each only when the run has that experiment.
Bars are medians over the repeats, whiskers the min–max range. Needs matplotlib
(pip install matplotlib).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def stats(samples, exp, setup, metric):
    v = sorted(s["value"] for s in samples if s["exp"] == exp and s["setup"] == setup and s["metric"] == metric)
    if not v:
        return None
    n = len(v)
    med = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return med, v[0], v[-1]


def bars(ax, labels, triples, color, ylabel, title, annotate=None):
    xs = range(len(labels))
    meds = [t[0] if t else 0 for t in triples]
    lo = [t[0] - t[1] if t else 0 for t in triples]
    hi = [t[2] - t[0] if t else 0 for t in triples]
    ax.bar(xs, meds, yerr=[lo, hi], capsize=4, color=color, edgecolor="black", linewidth=0.6)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if annotate:
        for x, m, txt in zip(xs, meds, annotate):
            if txt:
                ax.annotate(txt, (x, m), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=9, fontweight="bold")


def speedup_plot(doc, samples, out):
    setups = [("1-tier", "1 tier\n(slow-pfs only)"), ("2-tiers", "2 tiers\n(RAM + slow-pfs)"), ("3-tiers", "3 tiers\n(RAM + disk + slow-pfs)")]
    have = [(k, l) for k, l in setups if stats(samples, "tiering", k, "write")]
    if not have:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, metric, title in [(axes[0], "write", "VPIC-like write"), (axes[1], "read", "BD-CATS-like read")]:
        trip = [stats(samples, "tiering", k, metric) for k, _ in have]
        base = stats(samples, "tiering", "1-tier", metric)
        ann = [f"{t[0] / base[0]:.1f}×" if (t and base) else "" for t in trip]
        bars(ax, [l for _, l in have], trip, ["#b0b0b0", "#6fa8dc", "#3d85c6"][: len(have)], "MiB/s (median, min–max)", title, ann)
        for ref, style in [("tmpfs", "--"), ("disk", ":")]:
            r = stats(samples, "tiering", ref, metric)
            if r:
                ax.axhline(r[0], linestyle=style, color="darkred", linewidth=1)
                ax.annotate(f"{ref} direct {r[0]:.0f}", (len(have) - 0.5, r[0]), textcoords="offset points", xytext=(0, 3), ha="right", fontsize=8, color="darkred")
        if metric == "write":
            wd = [stats(samples, "tiering", k, "write+drain") for k, _ in have]
            xs = [i for i, t in enumerate(wd) if t]
            if xs:
                ax.scatter(xs, [wd[i][0] for i in xs], marker="D", color="black", zorder=3, label="write + drain to slow-pfs")
                ax.legend(fontsize=8, loc="upper left")
    s = doc.get("settings", {})
    fig.suptitle(f"Impact of tiering: {s.get('data', 0) / 2**30:.1f} GiB, {s.get('procs')} processes, RAM tier {s.get('ram', 0) / 2**20:.0f} MiB (speedup vs 1 tier)", fontsize=11)
    return save(fig, out, "tiers-speedup.png")


def save(fig, out, name):
    """Lays out, writes out/name (PNG) and closes the figure; returns the path."""
    fig.tight_layout()
    p = os.path.join(out, name)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def placement_plot(doc, samples, out):
    exps = [e for e in ["placement", "placement-fit"] if any(s["exp"] == e for s in samples)]
    if not exps:
        return None
    st = doc.get("settings", {})
    fig, axes = plt.subplots(len(exps), 3, figsize=(13, 4.2 * len(exps)), squeeze=False)
    for row, exp in zip(axes, exps):
        pols = [p for p in ["minimize_io_time", "round_robin", "random"] if stats(samples, exp, p, "put")]
        labels = [p.replace("_", "\n", 1) if p == "minimize_io_time" else p.replace("_", " ") for p in pols]
        ram_mib = (st.get("put_ram_fit", 0) if exp == "placement-fit" else st.get("put_ram", 0)) / 2**20
        where = f"RAM tier {ram_mib:.0f} MiB" + (" (data fits)" if exp == "placement-fit" else " (data = 2 x RAM)")
        bars(row[0], labels, [stats(samples, exp, p, "put time") for p in pols], "#93c47d", "seconds (median, min–max)", f"put time, {where}")
        ram = [stats(samples, exp, p, "RAM used") for p in pols]
        disk = [stats(samples, exp, p, "disk used") for p in pols]
        xs = range(len(pols))
        r = [t[0] if t else 0 for t in ram]
        d = [t[0] if t else 0 for t in disk]
        row[1].bar(xs, r, color="#3d85c6", edgecolor="black", linewidth=0.6, label="RAM tier")
        row[1].bar(xs, d, bottom=r, color="#e69138", edgecolor="black", linewidth=0.6, label="disk tier")
        row[1].set_xticks(list(xs))
        row[1].set_xticklabels(labels)
        row[1].set_ylabel("MiB after the puts (median)")
        row[1].set_title("bytes per tier")
        row[1].legend(fontsize=8)
        row[1].grid(axis="y", alpha=0.3)
        bars(row[2], labels, [stats(samples, exp, p, "get") for p in pols], "#8e7cc3", "MiB/s (median, min–max)", "get all blobs back (disk cache dropped)")
    fig.suptitle(f"Placement engines: {st.get('put_threads')} threads put {st.get('put_data', 0) / 2**30:.1f} GiB of {st.get('put_size', 0) / 2**20:.0f} MiB blobs into RAM + disk tiers", fontsize=11)
    return save(fig, out, "tiers-placement.png")


def readahead_plot(doc, samples, out):
    exps = [e for e in ["readahead", "readahead-io"] if any(s["exp"] == e for s in samples)]
    if not exps:
        return None
    st = doc.get("settings", {})
    fig, axes = plt.subplots(1, 2 * len(exps), figsize=(5.2 * len(exps) * 2 / 2 + 1, 4.2), squeeze=False)
    for k, exp in enumerate(exps):
        think = st.get("ra_think_us" if exp == "readahead" else "ra_io_think_us", 0) / 1000
        have = [s for s in ["off", "readahead"] if stats(samples, exp, s, "run time")]
        base = stats(samples, exp, "off", "run time")
        trip = [stats(samples, exp, s, "run time") for s in have]
        ann = [f"{t[0] / base[0]:.2f}×" if (t and base) else "" for t in trip]
        bars(axes[0][2 * k], have, trip, "#6fa8dc", "seconds (median, min–max)", f"run time, {think:g} ms compute / MiB", ann)
        bars(axes[0][2 * k + 1], have, [stats(samples, exp, s, "read from buffer") for s in have], "#93c47d", "% of bytes read from the buffer", f"buffer hits, {think:g} ms compute / MiB")
    fig.suptitle(f"Read-ahead: {st.get('ra_files')} readers, {st.get('ra_data', 0) / 2**20:.0f} MiB of files on slow-pfs, RAM tier {st.get('ra_ram', 0) / 2**20:.0f} MiB, readahead_pages {st.get('ra_pages')}", fontsize=11)
    return save(fig, out, "tiers-readahead.png")


def organizer_plot(doc, samples, out):
    order = ["off", "organizer", "prefetch", "both"]
    have = [k for k in order if stats(samples, "organizer", k, "read")]
    if not have:
        return None
    st = doc.get("settings", {})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    base = stats(samples, "organizer", "off", "read")
    trip = [stats(samples, "organizer", k, "read") for k in have]
    ann = [f"{t[0] / base[0]:.2f}×" if (t and base) else "" for t in trip]
    bars(axes[0], have, trip, "#6fa8dc", "MiB/s over I/O time (median, min–max)", "read throughput, passes 2..N", ann)
    # Per pass, median over repeats, from the daemon counters.
    colors = {"off": "#999999", "organizer": "#3d85c6", "prefetch": "#e69138", "both": "#6aa84f"}
    for k in have:
        reps = [c["passes"] for c in doc.get("daemon_counters", []) if c.get("exp") == "organizer" and c.get("setup") == k and c.get("passes")]
        if not reps:
            continue
        n = min(len(r) for r in reps)
        def med(v):
            v = sorted(v)
            m = len(v)
            return v[m // 2] if m % 2 else (v[m // 2 - 1] + v[m // 2]) / 2
        hit = [med([100.0 * r[i][2] / max(r[i][1], 1) for r in reps]) for i in range(n)]
        mib = [med([r[i][1] / 2**20 / max(r[i][0], 1e-9) for r in reps]) for i in range(n)]
        xs = list(range(1, n + 1))
        axes[1].plot(xs, hit, marker="o", color=colors.get(k), label=k)
        axes[2].plot(xs, mib, marker="o", color=colors.get(k), label=k)
    axes[1].set_xlabel("pass over the hot set")
    axes[1].set_ylabel("% of bytes read from RAM (median)")
    axes[1].set_title("RAM hit rate per pass", fontsize=10)
    axes[2].set_xlabel("pass over the hot set")
    axes[2].set_ylabel("MiB/s over I/O time (median)")
    axes[2].set_title("read throughput per pass", fontsize=10)
    for ax in axes[1:]:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Working set larger than RAM: {st.get('org_data', 0) / 2**20:.0f} MiB of blobs, RAM tier {st.get('org_ram', 0) / 2**20:.0f} MiB, hot set {st.get('org_hot', 0) / 2**20:.0f} MiB on disk, organizer / prefetcher on vs off",
        fontsize=11,
    )
    return save(fig, out, "tiers-organizer.png")


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(src))
    with open(src) as f:
        doc = json.load(f)
    if doc.get("bench") != "tiers":
        sys.exit(f"{src} is not saved by `strata bench tiers --save`")
    os.makedirs(out, exist_ok=True)
    samples = doc["samples"]
    for fn in (speedup_plot, placement_plot, readahead_plot, organizer_plot):
        p = fn(doc, samples, out)
        if p:
            print(p)


if __name__ == "__main__":
    main()
