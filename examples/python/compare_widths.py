#!/usr/bin/env python3
"""Compare `coverage_table -- N widths per_cell` with `... analytic` cell by cell (docs/intervals.md, section 7).

Usage: compare_widths.py per_cell.tsv analytic.tsv
"""
import sys, collections
# Compare per-cell median widths of two coverage_table widths runs (per_cell vs analytic).
def load(p):
    d = {}
    for line in open(p):
        if line.startswith("calibration"): continue
        c, eps, sizes, interval, px, py, s2, cov, w = line.rstrip("\n").split("\t")
        d[(eps, sizes, interval, px, py)] = (float(s2), float(cov), float(w))
    return d
old, new = load(sys.argv[1]), load(sys.argv[2])
n = 200
rows = collections.defaultdict(list)
for k, (s2, cov, w) in old.items():
    eps, sizes, interval, px, py = k
    if "score" not in interval: continue
    s2n, covn, wn = new[k]
    px, py = float(px), float(py)
    X, Y = n * px, n * py
    # Noise share of the delta-method variance of the log ratio, at today's (per-cell) noise.
    if interval.startswith("RR"):
        samp = (1 - px) / X + (1 - py) / Y
        noise = s2 * (1 / X**2 + 1 / Y**2)
        if sizes == "private": noise += s2 * (1 / (n)**2) * 2
    else:
        samp = 1/X + 1/(n-X) + 1/Y + 1/(n-Y)
        noise = s2 * (1/X**2 + 1/(n-X)**2 + 1/Y**2 + 1/(n-Y)**2)
    share = noise / (noise + samp)
    ratio = wn / w if w not in (0.0, float('inf')) else float('nan')
    rows[(eps, sizes, interval)].append((share, ratio, covn, px, py))
print("| setting | interval | cells | min coverage (analytic) | median width ratio analytic/per_cell, all cells | cells with noise share >= 0.5 | their largest ratio | their median ratio | cells among them above 0.75 |")
print("|---|---|---|---|---|---|---|---|---|")
for (eps, sizes, interval), v in sorted(rows.items()):
    rs = sorted(r for _, r, _, _, _ in v if r == r)
    heavy = sorted(r for s, r, _, _, _ in v if s >= 0.5 and r == r)
    med = lambda a: a[len(a)//2] if a else float('nan')
    print(f"| n = 200, ε = {eps}, gaussian, {sizes} sizes | {interval} | {len(v)} | {min(c for _,_,c,_,_ in v):.3f} | {med(rs):.3f} | {len(heavy)} | {max(heavy) if heavy else float('nan'):.3f} | {med(heavy):.3f} | {sum(1 for r in heavy if r > 0.75)} |")
