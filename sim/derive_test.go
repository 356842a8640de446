package sim

import (
	"strings"
	"testing"
	"time"
)

func TestDerive(t *testing.T) {
	pol := mustPolicy(t, `
tier "inference"   { priority = 90 }
tier "build"       { priority = 80 }
tier "interactive" { priority = 60 }
tier "training"    { priority = 40 }
tenant "a" {}
tenant "b" {}
`)
	tr := mustTrace(t, `
job,submit,gpus,allocs,run_time,user,tenant,tier,idle_after
small-short,0,1,1,300,u1,,,
gang,0,8,2,300,u1,,,
wide,0,16,1,300,u2,,,
huge,0,8,9,300,u2,,,
given,0,1,1,300,u3,b,inference,never`)
	d, err := Derive(tr, DeriveOptions{Seed: 1, Policy: pol, Nodes: 4, GPUsPerNode: 8})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]Job{}
	for _, j := range tr.Jobs {
		byID[j.ID] = j
	}
	if _, ok := byID["huge"]; ok || d.Dropped != 1 {
		t.Errorf("a job of 72 GPUs on a 32-GPU cluster was kept (dropped %d)", d.Dropped)
	}
	if j := byID["wide"]; j.GPUs != 8 || j.Allocs != 2 || d.Reshaped != 1 {
		t.Errorf("16 GPUs in one allocation became %d × %d; want 2 × 8", j.Allocs, j.GPUs)
	}
	if j := byID["small-short"]; j.Tier != "build" || j.IdleAfter != NeverIdle {
		t.Errorf("a 5-minute 1-GPU job became tier %s, idle after %s; want build, never", j.Tier, j.IdleAfter)
	}
	if j := byID["gang"]; j.Tier != "training" {
		t.Errorf("a gang became tier %s; want training", j.Tier)
	}
	if j := byID["given"]; j.Tier != "inference" || j.Tenant != "b" || j.IdleAfter != NeverIdle || d.Given != 1 {
		t.Errorf("values the trace gave were not kept: %+v", j)
	}
	for _, j := range tr.Jobs {
		if j.Tenant != "a" && j.Tenant != "b" {
			t.Errorf("job %s: tenant %q is not one of the policy's", j.ID, j.Tenant)
		}
	}
	if byID["small-short"].Tenant != byID["gang"].Tenant {
		t.Error("one user's jobs went to different tenants")
	}
	rule := d.Rule()
	for _, want := range []string{"seed 1", "→ build", "→ training", "1 dropped", "1 re-split", "kept"} {
		if !strings.Contains(rule, want) {
			t.Errorf("rule does not mention %q:\n%s", want, rule)
		}
	}
}

// The rule maps four classes onto however many tiers a policy has,
// keeping the order.
func TestClassTier(t *testing.T) {
	tests := []struct {
		tiers int
		want  [numClasses]int
	}{{1, [4]int{0, 0, 0, 0}}, {2, [4]int{0, 0, 1, 1}}, {4, [4]int{0, 1, 2, 3}}, {6, [4]int{0, 2, 3, 5}}}
	for _, tc := range tests {
		for c := range numClasses {
			if got := classTier(c, tc.tiers); got != tc.want[c] {
				t.Errorf("%d tiers: class %s → tier %d, want %d", tc.tiers, classNames[c], got, tc.want[c])
			}
		}
	}
}

// Same seed, same workload; another seed, another.
func TestDeriveIsSeeded(t *testing.T) {
	pol := mustPolicy(t, tinyPolicy+`tenant "a" {}
tenant "b" {}
tenant "c" {}`)
	var csv strings.Builder
	csv.WriteString("job,submit,gpus,run_time,user\n")
	for i := range 400 {
		csv.WriteString("j" + itoa(i) + ",0,1," + itoa(900+i*131%30000) + ",u" + itoa(i%37) + "\n")
	}
	derive := func(seed uint64) string {
		tr := mustTrace(t, csv.String())
		if _, err := Derive(tr, DeriveOptions{Seed: seed, Policy: pol, Nodes: 1, GPUsPerNode: 8}); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, j := range tr.Jobs {
			b.WriteString(j.Tenant + j.Tier + time.Duration(j.IdleAfter).String())
		}
		return b.String()
	}
	if first, again := derive(1), derive(1); first != again {
		t.Error("the same seed gave two workloads")
	}
	if derive(1) == derive(2) {
		t.Error("two seeds gave the same workload")
	}
}
