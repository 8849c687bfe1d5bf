#!/usr/bin/env python3
"""Summarise `coverage_table -- N wref <calibration>` (issue 45's restated width target,
docs/intervals.md section 7): per setting and interval, the cells whose median width exceeds
1.05 x W_ref, the largest ratio and where, the range of z*, and the coverage minima.

Usage: wref_summary.py wref.tsv [cells]   (`cells` also lists every cell over 1.05)
"""
import sys, collections

rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[0] == "calibration":
        head = f
        continue
    r = dict(zip(head, f))
    for k in head[4:]:
        r[k] = float(r[k])
    rows[(r["epsilon"], r["sizes"], r["interval"])].append(r)

print("| setting | interval | cells > 1.05 | of them > 1.05 + 2 SE | largest ratio (SE) | at (p_x, p_y) | z* range | min coverage, default | min coverage, paper's at 1.96 | min coverage, paper's at z* |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (eps, sizes, interval), v in rows.items():
    over = [r for r in v if r["ratio"] > 1.05]
    sure = [r for r in over if r["ratio"] > 1.05 + 2 * r["ratio_se"]]
    top = max(v, key=lambda r: r["ratio"])
    zs = [r["z_star"] for r in v]
    print(f"| n = 200, ε = {eps}, gaussian, {sizes} sizes | {interval} | {len(over)} | {len(sure)} "
          f"| {top['ratio']:.3f} ({top['ratio_se']:.3f}) | ({top['p_x']}, {top['p_y']}) "
          f"| {min(zs):.3f}-{max(zs):.3f} | {min(r['coverage'] for r in v):.4f} "
          f"| {min(r['paper_coverage'] for r in v):.4f} | {min(r['paper_coverage_at_z_star'] for r in v):.4f} |")
if len(sys.argv) > 2:
    print()
    print("| setting | interval | (p_x, p_y) | ratio (SE) | z* (SE) | coverage | W_ref | median width |")
    print("|---|---|---|---|---|---|---|---|")
    for (eps, sizes, interval), v in rows.items():
        for r in v:
            if r["ratio"] > 1.05:
                print(f"| ε = {eps}, {sizes} | {interval} | ({r['p_x']}, {r['p_y']}) | {r['ratio']:.3f} ({r['ratio_se']:.3f}) "
                      f"| {r['z_star']:.3f} ({r['z_star_se']:.3f}) | {r['coverage']:.4f} | {r['w_ref']:.4g} | {r['median_width']:.4g} |")
