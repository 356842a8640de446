package scale

import "fmt"

// policyFor is the harness's policy for a cluster of gpus GPUs: the tiers
// of example.hcl, three tenants (two with reserves, one that only
// borrows) sized to the cluster, and an idle rule for notebooks that acts
// under pressure after two minutes.
func policyFor(gpus int) string {
	pct := func(p int) int { return max(1, gpus*p/100) }
	return fmt.Sprintf(`
tier "inference" {
  priority      = 90
  preemptible   = false
  preempt_grace = "0s"
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
  reserve = %d
  limit   = %d
}
tenant "research" {
  reserve = %d
  limit   = %d
  tiers   = ["interactive", "training"]
  default_tier = "training"
}
tenant "platform" {
  reserve = 0
  limit   = %d
  tiers   = ["interactive", "training"]
}
idle "notebooks" {
  tiers     = ["interactive"]
  threshold = 10
  after     = "2m"
  mode      = "pressure"
}
preemption {
  min_runtime          = "1m"
  grace                = "30s"
  max_per_job_per_hour = 2
}
`, pct(35), pct(70), pct(35), pct(70), pct(25))
}
