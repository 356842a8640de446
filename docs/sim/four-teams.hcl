# Four equal teams whose serving is not preemptible, with small reserves:
# the policy of issue 31 ("inference waits for days when a team's serving
# exceeds its reserve"), for the simulator. Written for one 8-GPU node, as
# example.hcl is: each team reserves 1 GPU of 8 (an eighth of the cluster
# each, half of it in all), so a team's serving outgrows its reserve as soon
# as it runs more than its eighth. Scale it with the cluster:
#
#   bin/steward simulate -policy docs/sim/four-teams.hcl -scale 100 -trace philly -trace helios
#
# The simulator spreads a trace's users evenly over the tenants and maps its
# four shape classes onto the tiers by rank (docs/simulator.md): service ->
# serving, build -> build, interactive -> interactive, batch -> training.
# Everything else is left at its default (beyond_reserve "run",
# max_per_job 10).
#
# Where it bites is a pressured cluster, where each team's reserve is 10
# GPUs of 80 and serving outgrows it (at -scale 100 serving rarely does):
#
#   bin/steward simulate -policy docs/sim/four-teams.hcl -nodes 10 -scale 10 -limit 3000 -trace philly
#
# serving p99 20,583 min before issue 31 (it waited beyond its reserve on
# free GPUs), 0.1 after (strict: 0.0); build p99 8,467 -> 7.4. Interactive
# work pays for it: p95 627 -> 14,023 min (strict 620): serving that ran
# beyond its reserve is reclaimed by teams under theirs and takes
# interactive GPUs back by priority. Not fixed yet.
#
# Fair share over time is on, as in example.hcl (since 30 November 2026;
# before, this file had no preemption block and its fair-share row measured
# a policy that never asked for fairness over time). Seeds 1 and 2, the
# pressured runs above and the full ones (-scale 100), off -> on, days with
# Jain's index >= 0.9: Philly full 21/34 -> 29/33 and 22/35 -> 28/33,
# pressured 126/232 -> 167/225 and 94/207 -> 140/190; Helios full
# 11/12 -> 12/12 (met) and 12/12 -> 13/13, pressured 20/44 -> 18/53 (the one
# fall; its mean 0.865 -> 0.866) and 26/60 -> 43/58. The high tier's p95 and
# build's p99 fall or stay on all eight; wasted preemptions stay under
# 0.5 %, no stop over the cap, at most 10 stops of one job. The cost:
# Helios's full run loses 125 GPU-hours for 53 (seed 1) in fair-share
# reclaims, and pressured Philly's interactive waits over 30 minutes grow
# (5,418 -> 7,607 hours). docs/evaluation.md, "four teams with fair share
# over time on", has every row.

tier "serving" {
  priority      = 90
  preemptible   = false
  preempt_grace = "0s"
}

tier "build" {
  priority    = 80
  preemptible = false
}

tier "interactive" {
  priority = 60
}

tier "training" {
  priority = 40
}

tenant "team-a" {
  reserve = 1
}

tenant "team-b" {
  reserve = 1
}

tenant "team-c" {
  reserve = 1
}

tenant "team-d" {
  reserve = 1
}

idle "notebooks" {
  tiers = ["interactive"]
}

# A tenant's usage of borrowed GPUs decays with a day's half-life and
# orders tenants of equal rank; a tenant waiting to borrow may reclaim from
# one that used more than 1.5 times its fair share over time
# (docs/reference/policy.md#preemption).
preemption {
  fair_share_half_life     = "24h"
  fair_share_reclaim_above = 1.5
}
