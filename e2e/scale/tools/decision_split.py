#!/usr/bin/env python3
"""Sums the controller's "decision split" lines (issue 33) in a scale run's logs.

    python3 e2e/scale/tools/decision_split.py DIR [RULES]

DIR is a STEWARD_SCALE_LOGDIR (controller-*.log); RULES the preemption rules
to count, comma-separated (default priority,reclaim,backfill: the decisions
make scale measures). Prints, over the slow decisions (500 ms or more), each
part's sum, share, p50 and max, and how often each part was the largest.
"""
import glob
import re
import sys

PARTS = ["stream", "idle", "in_rounds", "observe", "recover", "plan", "act_before"]
UNITS = {"ms": 1, "µs": 1e-3, "us": 1e-3, "ns": 1e-6, "h": 3.6e6, "m": 6e4, "s": 1e3}


def ms(text):
    if "unknown" in text:
        return 0.0
    return sum(float(n) * UNITS[u] for n, u in re.findall(r"([\d.]+)(ms|µs|us|ns|h|m|s)", text.strip('"')))


def main():
    rules = set((sys.argv[2] if len(sys.argv) > 2 else "priority,reclaim,backfill").split(","))
    rows = []
    for path in sorted(glob.glob(sys.argv[1] + "/controller-*.log")):
        rule_of = {}  # job -> the rule of its last measured action
        for line in open(path, errors="replace"):
            kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
            if "decision split" in line:
                if rule_of.get(kv.get("job")) in rules:
                    rows.append(kv)
            elif "decision_latency=" in line:
                m = re.search(r'reason="(\w+):', line)
                rule_of[kv.get("job")] = m.group(1) if m else ""
    if not rows:
        print("no slow decisions")
        return
    total = sum(ms(r["decision_latency"]) for r in rows)
    print("%d slow decisions, %.0f ms in all" % (len(rows), total))
    largest = {}
    for r in rows:
        p = max(PARTS, key=lambda p: ms(r.get(p, "0")))
        largest[p] = largest.get(p, 0) + 1
    for p in PARTS:
        v = sorted(ms(r.get(p, "0")) for r in rows)
        print("%-10s %8.0f ms %5.1f %%  p50 %6.0f  max %6.0f  largest in %d"
              % (p, sum(v), 100 * sum(v) / total, v[len(v) // 2], v[-1], largest.get(p, 0)))


if __name__ == "__main__":
    main()
