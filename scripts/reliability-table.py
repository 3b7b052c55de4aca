"""Prints the reliability probe table from the rows test_reliability.py appends (one JSON object per
case: statuses seen, hang, corrupted), for one run or a before/after pair:

    .venv/bin/python scripts/reliability-table.py .artifacts/reliability.jsonl
    .venv/bin/python scripts/reliability-table.py BEFORE.jsonl AFTER.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(path: str) -> dict[str, dict]:
    rows = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["case"]] = row
    return rows


STATUS = {-1: "timeout", 0: "reset"}  # test_reliability.py's TIMEOUT and RESET


def cell(row: dict | None) -> str:
    if row is None:
        return "n/a"
    flags = [
        f"{row['fivexx']} x 5xx" if row["fivexx"] else "",
        "HANG" if row["hang"] else "",
        "CORRUPTED/LOST" if row["corrupted"] else "",
        row.get("wrong") or "",
    ]
    statuses = ",".join(STATUS.get(s, str(s)) for s in sorted(set(row["statuses"])))
    return " ".join(f for f in [statuses, *flags, "(injected fault)" if row.get("injected") else ""] if f)


def main() -> None:
    runs = [load(p) for p in sys.argv[1:]]
    if not runs:
        sys.exit(__doc__)
    cases = list(dict.fromkeys(case for run in runs[::-1] for case in run))
    names = ["before", "after"] if len(runs) == 2 else ["result"]
    print("| case | " + " | ".join(names) + " |")
    print("| --- |" + " --- |" * len(runs))
    for case in cases:
        print(f"| {case} | " + " | ".join(cell(run.get(case)) for run in runs) + " |")
    if len(runs) == 2:
        print("\nn/a: the case needs what the run lacks (ART_FAULT hooks), or the test stopped before it.")
    for name, run in zip(names, runs):
        rows = list(run.values())
        print(
            f"\n{name}: {len(rows)} cases, {sum(len(r['statuses']) for r in rows)} requests, "
            f"{sum(r['fivexx'] for r in rows)} 5xx, {sum(r['hang'] for r in rows)} hangs, "
            f"{sum(r['corrupted'] for r in rows)} corrupted or lost steps"
        )


main()
