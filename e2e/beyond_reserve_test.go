package e2e

import (
	"strings"
	"testing"
	"time"
)

// product reserves 1 GPU of the 4-GPU node, research 2; product's serving
// is not preemptible and runs beyond its reserve (beyond_reserve "run",
// the default).
const beyondReservePolicy = `
tier "inference" {
  priority    = 90
  preemptible = false
}
tier "training" {
  priority = 40
}
tenant "product" {
  reserve = 1
}
tenant "research" {
  reserve = 2
}
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`

// TestServingBeyondReserve (issue 31): product's second serving job, 2
// GPUs beyond its reserve of 1, starts on free GPUs rather than wait; when
// research submits training within its own reserve, it reclaims that job
// (the newest, beyond the reserve) and runs; product's first serving job,
// within the reserve, keeps running.
func TestServingBeyondReserve(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "product", "research")
	c.startController("ctl", writePolicy(t, beyondReservePolicy))

	c.work("serve-a", "product", "inference", 1, 1, "priority", "90")
	c.waitRunning(60*time.Second, map[string]int{"product/serve-a": 1})
	c.work("serve-b", "product", "inference", 2, 1, "priority", "90")
	c.waitRunning(60*time.Second, map[string]int{"product/serve-a": 1, "product/serve-b": 1})
	if rec := c.record("product", "serve-b"); rec["steward_rule"] == "reserve" {
		t.Errorf("serve-b waited for its reserve: %v", rec)
	}

	c.work("train", "research", "training", 2, 1, "priority", "40")
	c.waitRunning(90*time.Second, map[string]int{"product/serve-a": 1, "product/serve-b": 0, "research/train": 1})
	rec := c.waitRecord(30*time.Second, "product", "serve-b", "steward_state", "preempted")
	for _, want := range []string{
		"tenant product holds 3 GPUs, reserve 1: reclaiming 2 for another tenant's job (tenant research holds 0, reserve 2)", // the record names no other tenant's job
		"tier inference is safe from preemption only within tenant product's reserve of 1, and its non-preemptible work holds 3 GPUs",
	} {
		if !strings.Contains(rec["steward_reason"], want) {
			t.Errorf("serve-b's reason %q\n does not say %q", rec["steward_reason"], want)
		}
	}
}
