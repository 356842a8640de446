# demo-policy.hcl: example.hcl with times short enough for `make demo`.
#
# The same tiers, tenants and limits as example.hcl (read that file for what
# each attribute means); only what takes minutes in real life is shortened,
# so that the demo's whole story plays in about two minutes:
#
#   idle "notebooks"  after 30s, action "stop"   (example.hcl: 15m, "requeue";
#                     stopped for good keeps the demo's story short: a
#                     requeued notebook would come back once GPUs are free)
#   preemption        min_runtime 0s, grace 10s, 4 preemptions per job an
#                     hour (example.hcl: 10m, 2m, 2)
#
# `make demo` runs the controller with it:
#   bin/steward controller -policy jobs/demo-policy.hcl

defaults {
  tier = "training"
}

tier "inference" {
  priority    = 90
  preemptible = false
}

tier "build" {
  priority    = 80
  preemptible = false
}

tier "interactive" {
  priority    = 60
  preemptible = true
}

tier "training" {
  priority    = 40
  preemptible = true
}

tenant "product" {
  reserve = 4
  limit   = 8
}

tenant "research" {
  reserve      = 4
  limit        = 6
  tiers        = ["interactive", "training"]
  default_tier = "training"
}

tenant "platform" {
  reserve = 0
  limit   = 2
  weight  = 0.5
  tiers   = ["interactive", "training"]
}

pool "serving" {
  owners = ["inference"]
}

idle "notebooks" {
  tiers     = ["interactive"]
  threshold = 10
  after     = "30s"
  mode      = "pressure"
  action    = "stop"
}

idle "abandoned" {
  tiers     = ["training"]
  tenants   = ["research", "platform"]
  threshold = 2
  after     = "1h"
  mode      = "always"
  action    = "stop"
}

preemption {
  min_runtime          = "0s"
  grace                = "10s"
  checkpoint_signal    = "SIGUSR1"
  max_per_job_per_hour = 4
}
