# demo-fleet-policy.hcl: the policy of `DEMO=fleet make demo`, a fleet of two
# GPU models in two node pools:
#
#   node pool onprem: 4 simulated H100s (80 GiB)
#   node pool cloud:  4 simulated A100s (40 GiB)
#
# Training prefers onprem and goes to the cloud when onprem has no room (a
# pool precedence); research has 2 of the H100s reserved (a reserve within
# the h100 pool), whatever it holds elsewhere. Times are short, as in
# demo-policy.hcl; example.hcl says what each attribute means.

defaults {
  tier = "training"
}

tier "inference" {
  priority    = 90
  preemptible = false
}

tier "interactive" {
  priority    = 60
  preemptible = true
}

tier "training" {
  priority    = 40
  preemptible = true
  pools       = ["onprem", "cloud"]
}

tenant "product" {
  reserve = 2
}

tenant "research" {
  reserve = 2

  pool "h100" {
    reserve = 2
  }
}

tenant "platform" {
  reserve = 0
  limit   = 2
  tiers   = ["interactive", "training"]
}

pool "onprem" {
  node_pool = "onprem"
}

pool "cloud" {
  node_pool = "cloud"
}

pool "h100" {
  models = ["Simulated H100"]
}

preemption {
  min_runtime          = "0s"
  grace                = "10s"
  max_per_job_per_hour = 4
}
