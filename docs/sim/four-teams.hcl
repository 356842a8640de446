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
