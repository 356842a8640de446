package policy

import (
	"slices"
	"testing"
)

// jobMetaPolicy: four tiers; research may use two of them, platform two
// with no default_tier (so the lowest it may use), product every tier.
const jobMetaPolicy = `
defaults { tier = "training" }
tier "inference" {
  priority    = 90
  preemptible = false
}
tier "build" {
  priority    = 80
  preemptible = false
}
tier "interactive" { priority = 60 }
tier "training" { priority = 40 }
tenant "product" { reserve = 4 }
tenant "research" {
  reserve      = 4
  tiers        = ["interactive", "training"]
  default_tier = "training"
}
tenant "platform" {
  reserve = 2
  tiers   = ["build", "interactive"]
}
tenant "quiet" {
  reserve      = 2
  default_tier = "interactive"
}
preemption { checkpoint_signal = "SIGUSR1" }
`

// TestResolveJob: what a job's meta becomes in its tenant, and the
// problems with what it asked for, word for word.
func TestResolveJob(t *testing.T) {
	p := mustParse(t, Source{Name: "p.hcl", Bytes: []byte(jobMetaPolicy)})
	tests := []struct {
		name       string
		namespace  string
		meta       map[string]string
		tenant     string
		tier       string
		gang       bool
		checkpoint string
		problems   []string
	}{
		{
			name: "no meta: the policy's default tier and signal", namespace: "product",
			tenant: "product", tier: "training", checkpoint: "SIGUSR1",
		},
		{
			name: "valid values are honoured", namespace: "product",
			meta:   map[string]string{"steward.tier": "inference", "steward.gang": "true", "steward.checkpoint_signal": "usr2"},
			tenant: "product", tier: "inference", gang: true, checkpoint: "SIGUSR2",
		},
		{
			name: "gang false and a signal without SIG", namespace: "product",
			meta:   map[string]string{"steward.gang": "false", "steward.checkpoint_signal": "TERM"},
			tenant: "product", tier: "training", checkpoint: "SIGTERM",
		},
		{
			name: "unknown tier with a suggestion", namespace: "product",
			meta:   map[string]string{"steward.tier": "infrence"},
			tenant: "product", tier: "training", checkpoint: "SIGUSR1",
			problems: []string{`tier "infrence" is not defined (did you mean inference?): runs as training`},
		},
		{
			name: "unknown tier without a suggestion", namespace: "product",
			meta:   map[string]string{"steward.tier": "gold"},
			tenant: "product", tier: "training", checkpoint: "SIGUSR1",
			problems: []string{`tier "gold" is not defined: runs as training`},
		},
		{
			name: "tier not allowed for the tenant", namespace: "research",
			meta:   map[string]string{"steward.tier": "inference"},
			tenant: "research", tier: "training", checkpoint: "SIGUSR1",
			problems: []string{"tier inference is not allowed for tenant research: runs as training"},
		},
		{
			name: "allowed tier", namespace: "research",
			meta:   map[string]string{"steward.tier": "interactive"},
			tenant: "research", tier: "interactive", checkpoint: "SIGUSR1",
		},
		{
			name: "default_tier for a job that names none", namespace: "quiet",
			tenant: "quiet", tier: "interactive", checkpoint: "SIGUSR1",
		},
		{
			name: "no default_tier, policy default not allowed: the lowest tier it may use", namespace: "platform",
			meta:   map[string]string{"steward.tier": "training"},
			tenant: "platform", tier: "interactive", checkpoint: "SIGUSR1",
			problems: []string{"tier training is not allowed for tenant platform: runs as interactive"},
		},
		{
			name: "a namespace no tenant names may not take a non-preemptible tier", namespace: "elsewhere",
			meta:   map[string]string{"steward.tier": "build"},
			tenant: "elsewhere", tier: "training", checkpoint: "SIGUSR1",
			problems: []string{"tier build is not allowed in namespace elsewhere, which no tenant block names (only the default tier, training): runs as training"},
		},
		{
			name: "a namespace no tenant names may not take a higher preemptible tier", namespace: "elsewhere",
			meta:   map[string]string{"steward.tier": "interactive"},
			tenant: "elsewhere", tier: "training", checkpoint: "SIGUSR1",
			problems: []string{"tier interactive is not allowed in namespace elsewhere, which no tenant block names (only the default tier, training): runs as training"},
		},
		{
			name: "a namespace no tenant names runs in the default tier", namespace: "elsewhere",
			meta:   map[string]string{"steward.tier": "training"},
			tenant: "elsewhere", tier: "training", checkpoint: "SIGUSR1",
		},
		{
			name: "a namespace no tenant names, no tier: the default tier", namespace: "elsewhere",
			tenant: "elsewhere", tier: "training", checkpoint: "SIGUSR1",
		},
		{
			name: `gang "maybe"`, namespace: "product",
			meta:   map[string]string{"steward.gang": "maybe"},
			tenant: "product", tier: "training", checkpoint: "SIGUSR1",
			problems: []string{`steward.gang "maybe" is not true or false: not a gang`},
		},
		{
			name: `checkpoint "SIGFOO"`, namespace: "product",
			meta:   map[string]string{"steward.checkpoint_signal": "SIGFOO"},
			tenant: "product", tier: "training", checkpoint: "SIGUSR1",
			problems: []string{`steward.checkpoint_signal "SIGFOO" is not a signal name (did you mean SIGFPE?): uses SIGUSR1`},
		},
		{
			name: "checkpoint with a suggestion", namespace: "product",
			meta:   map[string]string{"steward.checkpoint_signal": "SIGUSR3"},
			tenant: "product", tier: "training", checkpoint: "SIGUSR1",
			problems: []string{`steward.checkpoint_signal "SIGUSR3" is not a signal name (did you mean SIGUSR1?): uses SIGUSR1`},
		},
		{
			name: `checkpoint "SIGPWR": a Linux signal Nomad cannot send`, namespace: "product",
			meta:   map[string]string{"steward.checkpoint_signal": "SIGPWR"},
			tenant: "product", tier: "training", checkpoint: "SIGUSR1",
			problems: []string{`steward.checkpoint_signal "SIGPWR" is a signal Nomad cannot send (raw_exec and exec would send SIGINT): uses SIGUSR1`},
		},
		{
			name: `checkpoint "poll" (SIGPOLL, which Nomad lacks)`, namespace: "product",
			meta:   map[string]string{"steward.checkpoint_signal": "poll"},
			tenant: "product", tier: "training", checkpoint: "SIGUSR1",
			problems: []string{`steward.checkpoint_signal "poll" is a signal Nomad cannot send (raw_exec and exec would send SIGINT): uses SIGUSR1`},
		},
		{
			name: `checkpoint "usr2" is honoured`, namespace: "product",
			meta:   map[string]string{"steward.checkpoint_signal": "usr2"},
			tenant: "product", tier: "training", checkpoint: "SIGUSR2",
		},
		{
			name: `checkpoint "none" opts out`, namespace: "product",
			meta:   map[string]string{"steward.checkpoint_signal": "none"},
			tenant: "product", tier: "training", checkpoint: "",
		},
		{
			name: "every problem at once, in order", namespace: "research",
			meta:   map[string]string{"steward.tier": "build", "steward.gang": "yes", "steward.checkpoint_signal": "KILLME"},
			tenant: "research", tier: "training", checkpoint: "SIGUSR1",
			problems: []string{
				"tier build is not allowed for tenant research: runs as training",
				`steward.gang "yes" is not true or false: not a gang`,
				`steward.checkpoint_signal "KILLME" is not a signal name (did you mean SIGKILL?): uses SIGUSR1`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := p.ResolveJob(tt.namespace, tt.meta)
			if s.Tenant == nil || s.Tenant.Name != tt.tenant {
				t.Fatalf("tenant = %+v, want %s", s.Tenant, tt.tenant)
			}
			if s.Tier != tt.tier || s.Requested != tt.meta["steward.tier"] {
				t.Errorf("tier = %q (requested %q), want %q (requested %q)", s.Tier, s.Requested, tt.tier, tt.meta["steward.tier"])
			}
			if s.Gang != tt.gang {
				t.Errorf("gang = %v, want %v", s.Gang, tt.gang)
			}
			if s.CheckpointSignal != tt.checkpoint {
				t.Errorf("checkpoint = %q, want %q", s.CheckpointSignal, tt.checkpoint)
			}
			if !slices.Equal(s.Problems, tt.problems) {
				t.Errorf("problems:\n got  %q\n want %q", s.Problems, tt.problems)
			}
		})
	}
}

// TestTenantDefaultTier: default_tier, else the policy's default when
// allowed, else the lowest-priority tier the tenant may use.
func TestTenantDefaultTier(t *testing.T) {
	p := mustParse(t, Source{Name: "p.hcl", Bytes: []byte(jobMetaPolicy)})
	tests := []struct {
		name, tenant, want string
	}{
		{"every tier: the policy's default", "product", "training"},
		{"default_tier", "research", "training"},
		{"default_tier over the policy's default", "quiet", "interactive"},
		{"policy default not allowed: the lowest allowed", "platform", "interactive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.TenantDefaultTier(p.Tenants[tt.tenant]); got != tt.want {
				t.Errorf("TenantDefaultTier(%s) = %q, want %q", tt.tenant, got, tt.want)
			}
		})
	}
}

// TestUnnamedTiers: defaults.unnamed_tiers lets namespaces no tenant block
// names use the tiers it lists, and no others.
func TestUnnamedTiers(t *testing.T) {
	p := mustParse(t, Source{Name: "p.hcl", Bytes: []byte(`
defaults {
  tier          = "training"
  unnamed_tiers = ["interactive", "training"]
}
tier "inference" {
  priority    = 90
  preemptible = false
}
tier "interactive" { priority = 60 }
tier "training" { priority = 40 }
`)})
	for _, tc := range []struct {
		name, asks, tier, problem string
	}{
		{"a listed tier is honoured", "interactive", "interactive", ""},
		{"no tier: the default tier", "", "training", ""},
		{"a tier not listed runs as the default", "inference", "training",
			"tier inference is not allowed in namespace elsewhere, which no tenant block names (defaults.unnamed_tiers: interactive, training): runs as training"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := p.ResolveJob("elsewhere", map[string]string{"steward.tier": tc.asks})
			got := ""
			if len(s.Problems) > 0 {
				got = s.Problems[0]
			}
			if s.Tier != tc.tier || got != tc.problem {
				t.Fatalf("tier %q, problem %q; want %q, %q", s.Tier, got, tc.tier, tc.problem)
			}
		})
	}
}
