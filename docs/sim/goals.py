#!/usr/bin/env python3
# The goal tables of docs/evaluation.md ("Issue 31's goals, measured") from the simulator's results.json.
# usage: python3 docs/sim/goals.py POLICY_LABEL NONPREEMPTIBLE_TIERS(comma-separated) FULL_DIR PRESSURED_DIR
# Columns: Philly, Helios, Philly under pressure, Helios under pressure. "Met" reads each goal literally.
import json, sys
label, tiers, dfull, dpres = sys.argv[1], sys.argv[2].split(','), sys.argv[3], sys.argv[4]
def load(d):
    out = {}
    for run in json.load(open(d + '/results.json')):
        t = 'philly' if 'philly' in run['trace'] else 'helios'
        out[t] = {r['policy']: r for r in run['results']}
    return out
F, P = load(dfull), load(dpres)
cols = [F['philly'], F['helios'], P['philly'], P['helios']]
def n(x, nd=1):
    if x is None: return '–'
    if abs(x) < 1e-9: return '0'
    if abs(x) >= 1000: return f'{x:,.0f}'
    return f'{x:.{nd}f}'
def cmpgoal(s, k, factor):
    if k <= 1e-9: return s <= 1e-9
    return s <= factor * k
def tier(r, name):
    for t in r['delay_by_tier']:
        if t['tier'] == name: return t
    return {'p99_min': 0}
rows = []
def row(title, f):
    rows.append('| ' + title + ' | ' + ' | '.join(f(c) for c in cols) + ' |')
def nonpre(c):
    s, k = c['steward'], c['strict']; ok = True; parts = []
    for t in tiers:
        a, b = tier(s, t)['p99_min'], tier(k, t)['p99_min']
        ok &= cmpgoal(a, b, 2)
        parts.append(f'{t} {n(a)} = {n(b)}' if abs(a-b) < 0.05 else f'{t} {n(a)} vs {n(b)}')
    return ('met: ' if ok else '**not met**: ') + '; '.join(parts)
row('non-preemptible p99 ≤ 2× strict\'s (min)', nonpre)
def hi(key):
    def f(c):
        a, b = c['steward'][key]['p95_min'], c['strict'][key]['p95_min']
        return ('met: ' if cmpgoal(a, b, 1.1) else '**not met**: ') + (f'{n(a)} = {n(b)}' if abs(a-b) < 0.05 else f'{n(a)} vs {n(b)}')
    return f
row('high-tier p95 ≤ 1.1× strict\'s (min)', hi('high_priority_delay'))
row('high-tier p95 net of own limit ≤ 1.1× strict\'s (min)', hi('high_priority_delay_net_own_limit'))
row('high-tier p99 / net of own limit (strict\'s p99), min', lambda c: f"{n(c['steward']['high_priority_delay']['p99_min'])} / {n(c['steward']['high_priority_delay_net_own_limit']['p99_min'])} ({n(c['strict']['high_priority_delay']['p99_min'])})")
row('most stops of one job over its life ≤ 10', lambda c: ('met: ' if c['steward']['max_preemptions_per_job_life'] <= 10 else '**not met**: ') + f"{c['steward']['max_preemptions_per_job_life']} (strict {c['strict']['max_preemptions_per_job_life']})")
def lost(c):
    a, b = c['steward']['lost_gpu_hours'], c['strict']['lost_gpu_hours']
    return f'{n(a)} vs {n(b)} ({a/b:.2f}×)' if b else f'{n(a)} vs 0'
row('GPU-hours lost ≤ 0.5× strict\'s (the goal: `example.hcl` under pressure)', lost)
def fair(c):
    s = c['steward']
    ok = s['fair_share_windows'] > 0 and s['fair_share_fair_windows'] == s['fair_share_windows']
    return ('met: ' if ok else '**not met**: ') + f"{s['fair_share_jain']:.3f} / {s['fair_share_jain_min']:.3f}; {s['fair_share_fair_windows']} of {s['fair_share_windows']}"
row('fair share: Jain ≥ 0.9 every contested day (mean / worst day; days ≥ 0.9)', fair)
def waste(c):
    s = c['steward']; p = s['preemptions']; w = s['wasted_preemptions']
    pct = 100*w/p if p else 0
    return ('met: ' if pct <= 1 else '**not met**: ') + f'{w} of {p:,} ({pct:.2f} %)'
row('wasted preemptions ≤ 1 %', waste)
row('stops over the eviction cap = 0', lambda c: ('met: ' if c['steward']['cap_breaches'] == 0 else '**not met**: ') + f"{c['steward']['cap_breaches']} (strict {c['strict']['cap_breaches']})")
def waits(c):
    s = c['steward']
    def fmt(d):
        if not d: return '0'
        return ', '.join(f'{k} {n(v)}' for k, v in sorted(d.items(), key=lambda kv: -kv[1]) if v >= 0.05) or '0'
    return fmt(s.get('high_priority_wait_hours')) + ' / ' + fmt(s.get('high_priority_long_wait_hours'))
row('high-tier waits, hours by rule: all / over 30 min', waits)
print(f'| goal | `{label}` Philly | `{label}` Helios | `{label}` Philly, pressure | `{label}` Helios, pressure |')
print('|---|---|---|---|---|')
print('\n'.join(rows))
