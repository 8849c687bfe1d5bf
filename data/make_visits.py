#!/usr/bin/env python3
"""Generates data/visits.csv, the small synthetic dataset the quickstart uses.

Each row is one visit by a distinct patient (so the row is the privacy unit). Exposure and
outcome are drawn with a known relative risk per region, so the private estimates can be
compared with the truth. Standard library only; fixed seed, so the file is reproducible:
    python3 data/make_visits.py > data/visits.csv
"""
import random

REGIONS = {
    # region: (rows, P(exposed), P(outcome | exposed), P(outcome | unexposed))
    "north": (1400, 0.45, 0.30, 0.15),  # relative risk 2.0
    "south": (1200, 0.35, 0.24, 0.16),  # 1.5
    "east": (900, 0.50, 0.20, 0.20),    # 1.0
    "west": (500, 0.40, 0.10, 0.25),    # 0.4
}

def main():
    rng = random.Random(20261121)
    print("visit_id,patient_id,region,month,exposed,outcome")
    visit = 0
    for region, (rows, p_exposed, p_case_exposed, p_case_unexposed) in REGIONS.items():
        for _ in range(rows):
            visit += 1
            exposed = rng.random() < p_exposed
            outcome = rng.random() < (p_case_exposed if exposed else p_case_unexposed)
            month = f"2026-{rng.randint(1, 6):02d}"
            print(f"{visit},{100000 + visit},{region},{month},{str(exposed).lower()},{str(outcome).lower()}")

if __name__ == "__main__":
    main()
