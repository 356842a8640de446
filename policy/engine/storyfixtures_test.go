package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// t0 is the stories' epoch.
var t0 = time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)

// testPolicy is the four-tier policy the stories share; mod adjusts it.
func testPolicy(mod func(p *policy.Policy)) *policy.Policy {
	p := &policy.Policy{
		Defaults: policy.Defaults{Tier: "training", TierMetaKey: policy.DefaultTierMetaKey,
			GangMetaKey: policy.DefaultGangMetaKey, CheckpointMetaKey: policy.DefaultCheckpointMetaKey},
		Tiers: map[string]*policy.Tier{
			"inference":   {Name: "inference", Priority: 90, Preemptible: false},
			"build":       {Name: "build", Priority: 80, Preemptible: false},
			"interactive": {Name: "interactive", Priority: 60, Preemptible: true},
			"training":    {Name: "training", Priority: 40, Preemptible: true},
		},
		Tenants: map[string]*policy.Tenant{},
		Pools:   map[string]*policy.Pool{},
		Preemption: policy.Preemption{
			MinRuntime:       10 * time.Minute,
			Grace:            2 * time.Minute,
			CheckpointSignal: "SIGUSR1",
			MaxPerJobPerHour: 2,
			Promote:          policy.Promote{AfterPreemptions: 3, AfterWait: time.Hour, Boost: 10},
		},
	}
	if mod != nil {
		mod(p)
	}
	return p
}

func tenant(name string, reserve, limit int) *policy.Tenant {
	return &policy.Tenant{Name: name, Namespace: name, Reserve: reserve, Limit: limit, Weight: 1}
}

// kinds summarises a plan as "kind job[/group]" lines.
func kinds(p *Plan) []string {
	var out []string
	for _, a := range p.Actions {
		out = append(out, fmt.Sprintf("%s %s", a.Kind, a.Job))
	}
	return out
}

func actionOf(t *testing.T, p *Plan, kind Kind, job string) Action {
	t.Helper()
	for _, a := range p.Actions {
		if a.Kind == kind && a.Job.String() == job {
			return a
		}
	}
	t.Fatalf("no %s action for %s in plan:\n%s", kind, job, strings.Join(kinds(p), "\n"))
	return Action{}
}

func mustContain(t *testing.T, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("%q\n  does not contain %q", s, p)
		}
	}
}

// at builds a utilisation sample at an offset from an allocation's start.
func at(offset time.Duration, util float64) Sample {
	return Sample{At: time.Time{}.Add(offset), Util: util}
}
