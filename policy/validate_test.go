package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Each case is one mistake (or a few, to show that all are collected) and
// the exact diagnostics it must produce: nothing more, so that a mistake
// never drags a second, confusing error along with it.
func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name  string
		files []Source // with one file, a.hcl
		src   string
		want  []wantDiag
	}{
		// Syntax and schema, which hcl checks.
		{
			name: "syntax error",
			src:  "tier \"t\" {\n  priority = 5\n",
			want: []wantDiag{{"a.hcl:1,10", "Unclosed configuration block", "no closing brace"}},
		},
		{
			name: "a name that is not UTF-8",
			src:  "tier \xea\xea0 { priority = 1 }\n",
			want: []wantDiag{{"a.hcl:1,6", "Invalid UTF-8", "byte 0xea here is not"}},
		},
		{
			name: "a string that is not UTF-8 on a later line",
			src:  "tier \"t\" { priority = 1 }\ndefaults {\n  tier_meta_key = \"k\xff\"\n}\n",
			want: []wantDiag{{"a.hcl:3,21", "Invalid UTF-8", "byte 0xff here is not"}},
		},
		{
			name: "unknown block",
			src:  "tier \"t\" { priority = 5 }\ngpu \"x\" {}\n",
			want: []wantDiag{{"a.hcl:2,1", "Unsupported block type", `Blocks of type "gpu" are not expected here.`}},
		},
		{
			name: "unknown attribute with a suggestion",
			src:  "tier \"t\" {\n  priority = 5\n  preemptable = false\n}\n",
			want: []wantDiag{{"a.hcl:3,3", "Unsupported argument", `Did you mean "preemptible"?`}},
		},
		{
			name: "missing label",
			src:  "tier \"t\" { priority = 5 }\ntenant {}\n",
			want: []wantDiag{{"a.hcl:2,8", "Missing name for tenant", "All tenant blocks must have 1 labels (name)."}},
		},
		{
			name: "extra label",
			src:  "tier \"t\" \"u\" { priority = 5 }\n",
			want: []wantDiag{
				// The block is dropped, so there is indeed no tier.
				{"a.hcl:1,1", "No tiers", "at least one tier"},
				{"a.hcl:1,10", "Extraneous label for tier", "Only 1 labels (name) are expected for tier blocks."},
			},
		},
		{
			name: "empty label",
			src:  "tier \"t\" { priority = 5 }\ntenant \"\" {}\n",
			want: []wantDiag{{"a.hcl:2,8", "Empty tenant name", "non-empty name"}},
		},
		{
			name: "missing required attribute",
			src:  "tier \"t\" {}\n",
			want: []wantDiag{{"a.hcl:1,10", "Missing required argument", `The argument "priority" is required`}},
		},
		{
			name: "wrong type",
			src:  "tier \"t\" {\n  priority = \"high\"\n}\n",
			want: []wantDiag{{"a.hcl:2,14", "Incorrect attribute value type", `Inappropriate value for attribute "priority": a whole number is required.`}},
		},
		{
			name: "fraction for a whole number",
			src:  "tier \"t\" {\n  priority = 5.5\n}\n",
			want: []wantDiag{{"a.hcl:2,14", "Invalid whole number", `"priority" must be a whole number, not 5.5.`}},
		},
		{
			name: "string for a list",
			src:  "tier \"t\" { priority = 5 }\npool \"p\" { owners = \"t\" }\n",
			want: []wantDiag{{"a.hcl:2,21", "Incorrect attribute value type", `"owners": a list of strings is required.`}},
		},
		{
			name: "null value",
			src:  "tier \"t\" {\n  priority = 5\n  preemptible = null\n}\n",
			want: []wantDiag{{"a.hcl:3,17", "Invalid null value", "leave the attribute out to take its default"}},
		},
		{
			name: "null list element",
			src:  "tier \"t\" { priority = 5 }\npool \"p\" { owners = [\"t\", null] }\n",
			want: []wantDiag{{"a.hcl:2,27", "Invalid null value", `The elements of "owners" must be strings`}},
		},
		{
			name: "variable reference",
			src:  "tier \"t\" {\n  priority = high\n}\n",
			want: []wantDiag{{"a.hcl:2,14", "Variables not allowed", "Variables may not be used here."}},
		},
		{
			name: "function call",
			src:  "tier \"t\" {\n  priority = max(1, 2)\n}\n",
			want: []wantDiag{{"a.hcl:2,14", "Function calls not allowed", "Functions may not be called here."}},
		},
		{
			name: "number too large",
			src:  "tier \"t\" { priority = 5 }\ntenant \"x\" { reserve = 1e12 }\n",
			want: []wantDiag{{"a.hcl:2,24", "Number out of range", `"reserve" is too large`}},
		},

		// Duplicates.
		{
			name: "duplicate tier in one file",
			src:  "tier \"t\" { priority = 5 }\n\ntier \"t\" { priority = 6 }\n",
			want: []wantDiag{{"a.hcl:3,1", "Duplicate tier", `Tier "t" already defined at a.hcl:1,1-9;`}},
		},
		{
			name: "duplicate idle rule across files",
			files: []Source{
				{Name: "a.hcl", Bytes: []byte("tier \"t\" { priority = 5 }\nidle \"x\" {}\n")},
				{Name: "b.hcl", Bytes: []byte("\n\nidle \"x\" {}\n")},
			},
			want: []wantDiag{{"b.hcl:3,1", "Duplicate idle", `Idle "x" already defined at a.hcl:2,1-9;`}},
		},
		{
			name: "duplicate defaults across files",
			files: []Source{
				{Name: "a.hcl", Bytes: []byte("tier \"t\" { priority = 5 }\ndefaults {}\n")},
				{Name: "b.hcl", Bytes: []byte("defaults {}\n")},
			},
			want: []wantDiag{{"b.hcl:1,1", "Duplicate defaults", "Defaults block already defined at a.hcl:2,1-9;"}},
		},
		{
			name: "duplicate preemption, whose own mistakes are still reported",
			src:  "tier \"t\" { priority = 5 }\npreemption {}\npreemption { grace = \"soon\" }\n",
			want: []wantDiag{
				{"a.hcl:3,1", "Duplicate preemption", "Preemption block already defined at a.hcl:2,1-11;"},
				{"a.hcl:3,22", "Invalid duration", `not "soon"`},
			},
		},
		{
			name: "duplicate promote",
			src:  "tier \"t\" { priority = 5 }\npreemption {\n  promote {}\n  promote {}\n}\n",
			want: []wantDiag{{"a.hcl:4,3", "Duplicate promote", "Promote block already defined at a.hcl:3,3-10;"}},
		},
		{
			name: "namespace claimed twice",
			src:  "tier \"t\" { priority = 5 }\ntenant \"a\" {}\ntenant \"b\" { namespace = \"a\" }\n",
			want: []wantDiag{{"a.hcl:3,26", "Duplicate namespace", `Tenant "a" already has namespace "a";`}},
		},
		{
			name: "namespace claimed twice by default",
			src:  "tier \"t\" { priority = 5 }\ntenant \"x\" { namespace = \"y\" }\ntenant \"y\" {}\n",
			want: []wantDiag{{"a.hcl:3,1", "Duplicate namespace", `Tenant "x" already has namespace "y";`}},
		},
		{
			name: "node pool claimed twice",
			src:  "tier \"t\" { priority = 5 }\npool \"a\" { owners = [\"t\"] }\npool \"b\" {\n  owners = [\"t\"]\n  node_pool = \"a\"\n}\n",
			want: []wantDiag{{"a.hcl:5,15", "Overlapping pools", `Pools "a" and "b" both keep node pool "a" for their owners`}},
		},
		{
			name: "owners of models",
			src:  "tier \"t\" { priority = 5 }\npool \"a\" {\n  owners = [\"t\"]\n  models = [\"H100\"]\n}\n",
			want: []wantDiag{{"a.hcl:3,12", "Owners of GPU models", `Pool "a" has owners and models`}},
		},
		{
			name: "invalid pool order",
			src:  "tier \"t\" { priority = 5 }\npool \"a\" {\n  models = [\"H100\"]\n  order = \"largest\"\n}\n",
			want: []wantDiag{{"a.hcl:4,11", "Invalid pool order", `Pool "a" has order "largest"; use largest-first, smallest-first, fifo, or leave it out.`}},
		},
		{
			name: "pools without owners may overlap",
			src:  "tier \"t\" { priority = 5 }\npool \"a\" { models = [\"H100\"] }\npool \"b\" { node_pool = \"gpu\" }\n",
		},
		{
			name: "tenant pool unknown",
			src:  "tier \"t\" { priority = 5 }\npool \"h100\" { models = [\"H100\"] }\ntenant \"r\" {\n  pool \"h10\" {\n    reserve = 1\n  }\n}\n",
			want: []wantDiag{{"a.hcl:4,3", "Unknown pool", `Tenant "r" has a pool "h10" block, but no pool "h10" is defined. Did you mean "h100"?`}},
		},
		{
			name: "tenant pool limit below reserve",
			src:  "tier \"t\" { priority = 5 }\npool \"h100\" { models = [\"H100\"] }\ntenant \"r\" {\n  pool \"h100\" {\n    reserve = 2\n    limit = 1\n  }\n}\n",
			want: []wantDiag{{"a.hcl:6,13", "Limit below reserve", `has limit 1 but reserve 2 in pool "h100"`}},
		},
		{
			name: "tenant pool negative limit",
			src:  "tier \"t\" { priority = 5 }\npool \"h100\" { models = [\"H100\"] }\ntenant \"r\" {\n  pool \"h100\" {\n    limit = -1\n  }\n}\n",
			want: []wantDiag{{"a.hcl:5,13", `Invalid pool "h100" limit`, `pool "h100" limit must be 0 or more; got -1`}},
		},
		{
			name: "tenant pool twice",
			src:  "tier \"t\" { priority = 5 }\npool \"h100\" { models = [\"H100\"] }\ntenant \"r\" {\n  pool \"h100\" {}\n  pool \"h100\" {}\n}\n",
			want: []wantDiag{{"a.hcl:5,3", "Duplicate pool", `Tenant "r" already has a pool "h100" block`}},
		},
		{
			name: "invalid namespace name",
			src:  "tier \"t\" { priority = 5 }\ntenant \"ml team\" {}\n",
			want: []wantDiag{{"a.hcl:2,1", "Invalid namespace", `"ml team" of tenant "ml team" is not a valid Nomad namespace name`}},
		},
		{
			name: "invalid node pool name",
			src:  "tier \"t\" { priority = 5 }\npool \"p\" {\n  owners = [\"t\"]\n  node_pool = \"a/b\"\n}\n",
			want: []wantDiag{{"a.hcl:4,15", "Invalid node pool", `"a/b" of pool "p" is not a valid Nomad node pool name`}},
		},

		// Tenants.
		{
			name: "limit below reserve",
			src:  "tier \"t\" { priority = 5 }\ntenant \"x\" {\n  reserve = 4\n  limit = 2\n}\n",
			want: []wantDiag{{"a.hcl:4,11", "Limit below reserve", `Tenant "x" has limit 2 but reserve 4;`}},
		},
		{
			name: "negative reserve",
			src:  "tier \"t\" { priority = 5 }\ntenant \"x\" {\n  reserve = -1\n}\n",
			want: []wantDiag{{"a.hcl:3,13", "Invalid reserve", "reserve must be 0 or more; got -1."}},
		},
		{
			name: "negative limit, even the one that means unlimited inside",
			src:  "tier \"t\" { priority = 5 }\ntenant \"x\" {\n  limit = -1\n}\n",
			want: []wantDiag{{"a.hcl:3,11", "Invalid limit", "limit must be 0 or more; got -1. Leave limit out for no limit."}},
		},
		{
			name: "zero weight",
			src:  "tier \"t\" { priority = 5 }\ntenant \"x\" {\n  weight = 0\n}\n",
			want: []wantDiag{{"a.hcl:3,12", "Invalid weight", `The weight of tenant "x" must be a number greater than 0; got 0.`}},
		},
		{
			name: "negative weight",
			src:  "tier \"t\" { priority = 5 }\ntenant \"x\" { weight = -2 }\n",
			want: []wantDiag{{"a.hcl:2,23", "Invalid weight", "got -2."}},
		},

		// Tiers.
		{
			name: "priority 0",
			src:  "tier \"t\" {\n  priority = 0\n}\n",
			want: []wantDiag{{"a.hcl:2,14", "Invalid priority", `The priority of tier "t" must be between 1 and 100, the range of Nomad job priorities; got 0.`}},
		},
		{
			name: "priority 101",
			src:  "tier \"t\" { priority = 101 }\n",
			want: []wantDiag{{"a.hcl:1,23", "Invalid priority", "got 101."}},
		},
		{
			name: "no tiers",
			src:  "tenant \"x\" {}\n",
			want: []wantDiag{{"a.hcl:1,1", "No tiers", "A policy needs at least one tier block"}},
		},
		{
			name: "no tiers in any file is reported on the first",
			files: []Source{
				{Name: "a.hcl", Bytes: []byte("# nothing\n")},
				{Name: "b.hcl", Bytes: []byte("tenant \"x\" {}\n")},
			},
			want: []wantDiag{{"a.hcl:1,1", "No tiers", "at least one tier"}},
		},

		// References.
		{
			name: "unknown default tier with a suggestion",
			src:  "tier \"training\" { priority = 5 }\ndefaults {\n  tier = \"traning\"\n}\n",
			want: []wantDiag{{"a.hcl:3,10", "Unknown tier", `There is no tier "traning". Did you mean "training"?`}},
		},
		{
			name: "unknown pool owner",
			src:  "tier \"inference\" { priority = 5 }\npool \"p\" {\n  owners = [\"inference\", \"inferense\"]\n}\n",
			want: []wantDiag{{"a.hcl:3,26", "Unknown tier", `There is no tier "inferense". Did you mean "inference"?`}},
		},
		{
			name: "unknown idle tier without a suggestion",
			src:  "tier \"t\" { priority = 5 }\nidle \"i\" {\n  tiers = [\"gpu\"]\n}\n",
			want: []wantDiag{{"a.hcl:3,12", "Unknown tier", `There is no tier "gpu".`}},
		},
		{
			name: "unknown idle tenant",
			src:  "tier \"t\" { priority = 5 }\ntenant \"research\" {}\nidle \"i\" {\n  tenants = [\"reserch\"]\n}\n",
			want: []wantDiag{{"a.hcl:4,14", "Unknown tenant", `There is no tenant "reserch". Did you mean "research"?`}},
		},
		{
			name: "unknown tier in preempts_reserved",
			src:  "tier \"training\" { priority = 5 }\ntier \"i\" {\n  priority = 60\n  preempts_reserved = [\"traning\"]\n}\n",
			want: []wantDiag{{"a.hcl:4,24", "Unknown tier", `There is no tier "traning". Did you mean "training"?`}},
		},
		{
			name: "preempts_reserved names a tier not below",
			src:  "tier \"a\" { priority = 60 }\ntier \"b\" {\n  priority = 60\n  preempts_reserved = [\"a\"]\n}\n",
			want: []wantDiag{{"a.hcl:4,24", "Tier not below",
				`Tier "b" (priority 60) lists "a" (priority 60) in preempts_reserved, but a tier preempts only lower tiers; list tiers of a priority below 60.`}},
		},
		{
			name: "preempts_reserved names a tier that is not preemptible",
			src:  "tier \"a\" {\n  priority = 10\n  preemptible = false\n}\ntier \"b\" {\n  priority = 60\n  preempts_reserved = [\"a\"]\n}\n",
			want: []wantDiag{{"a.hcl:7,24", "Tier not preemptible",
				`Tier "b" lists "a" in preempts_reserved, but "a" is not preemptible: its work is never a victim, within a reserve or not.`}},
		},
		{
			name: "unknown tenant tier with a suggestion",
			src:  "tier \"inference\" { priority = 5 }\ntenant \"r\" {\n  reserve = 1\n  tiers = [\"infrence\"]\n}\n",
			want: []wantDiag{{"a.hcl:4,12", "Unknown tier", `There is no tier "infrence". Did you mean "inference"?`}},
		},
		{
			name: "unknown default_tier",
			src:  "tier \"training\" { priority = 5 }\ntenant \"r\" {\n  default_tier = \"traning\"\n}\n",
			want: []wantDiag{{"a.hcl:3,18", "Unknown tier", `There is no tier "traning". Did you mean "training"?`}},
		},
		{
			name: "default_tier the tenant may not use",
			src: `tier "interactive" { priority = 60 }
tier "training" { priority = 40 }
tenant "research" {
  tiers        = ["interactive"]
  default_tier = "training"
}
`,
			want: []wantDiag{{"a.hcl:5,18", "Default tier not allowed",
				`default_tier of tenant "research" is "training", which is not in its tiers list (interactive); its jobs that name no tier, or a tier it may not use, run in default_tier, so it must be one the tenant may use.`}},
		},
		{
			name: "repeated tenant tier is a warning",
			src:  "tier \"t\" { priority = 5 }\ntenant \"r\" { tiers = [\"t\", \"t\"] }\n",
			want: []wantDiag{{"a.hcl:2,28", "Repeated tier", `Tier "t" is listed more than once.`}},
		},
		{
			name: "non-preemptible tier that waits beyond reserves listed for a tenant without a reserve is a warning",
			src: `tier "inference" {
  priority    = 90
  preemptible = false
  beyond_reserve = "wait"
}
tier "training" { priority = 40 }
tenant "platform" {
  tiers = ["training", "inference"]
}
`,
			want: []wantDiag{{"a.hcl:8,24", "Non-preemptible tier without a reserve",
				`tenant "platform" has reserve 0, so its inference jobs would wait for ever`}},
		},
		{
			name: "every tier, non-preemptible ones that wait beyond reserves included, for a tenant without a reserve is a warning",
			src: `tier "inference" {
  priority    = 90
  preemptible = false
  beyond_reserve = "wait"
}
tier "training" { priority = 40 }
tenant "platform" {
  reserve = 0
}
`,
			want: []wantDiag{{"a.hcl:8,13", "Non-preemptible tiers without a reserve",
				`Tenant "platform" may use every tier (it lists no tiers) but has reserve 0`}},
		},
		{
			name: "a non-preemptible tier that runs beyond reserves is fine for a tenant without a reserve",
			src: `tier "inference" {
  priority    = 90
  preemptible = false
}
tier "training" { priority = 40 }
tenant "platform" {
  tiers = ["training", "inference"]
}
`,
		},
		{
			name: "invalid beyond_reserve",
			src:  "tier \"t\" {\n  priority = 5\n  preemptible = false\n  beyond_reserve = \"wiat\"\n}\n",
			want: []wantDiag{{"a.hcl:4,20", "Invalid beyond_reserve",
				`beyond_reserve of tier "t" must be "run" or "wait"; got "wiat".`}},
		},
		{
			name: "beyond_reserve wait on a preemptible tier is a warning",
			src:  "tier \"t\" {\n  priority = 5\n  beyond_reserve = \"wait\"\n}\n",
			want: []wantDiag{{"a.hcl:3,20", "beyond_reserve of a preemptible tier",
				`Tier "t" is preemptible`}},
		},
		{
			name: "negative max_per_job",
			src:  "tier \"t\" { priority = 5 }\npreemption {\n  max_per_job = -1\n}\n",
			want: []wantDiag{{"a.hcl:3,17", "Invalid max_per_job", "max_per_job must be 0 or more; got -1. Use 0 for no bound."}},
		},
		{
			name: "invalid resume order with a suggestion",
			src:  "tier \"t\" { priority = 5 }\npreemption {\n  resume_order = \"preempted_first\"\n}\n",
			want: []wantDiag{{"a.hcl:3,18", "Invalid resume order",
				`resume_order must be "preempted-first" or "longest-waiting"; got "preempted_first". Did you mean "preempted-first"?`}},
		},
		{
			name: "negative fair-share half-life",
			src:  "tier \"t\" { priority = 5 }\npreemption {\n  fair_share_half_life = \"-24h\"\n}\n",
			want: []wantDiag{{"a.hcl:3,26", "Negative duration", `fair_share_half_life must not be negative; got "-24h".`}},
		},
		{
			name: "fair-share half-life that is no duration",
			src:  "tier \"t\" { priority = 5 }\npreemption {\n  fair_share_half_life = \"a week\"\n}\n",
			want: []wantDiag{{"a.hcl:3,26", "Invalid duration",
				`The value of "fair_share_half_life" must be a duration such as "90s", "15m" or "1h30m", not "a week".`}},
		},
		{
			name: "fair-share reclaim below 1",
			src:  "tier \"t\" { priority = 5 }\npreemption {\n  fair_share_half_life = \"24h\"\n  fair_share_reclaim_above = 0.5\n}\n",
			want: []wantDiag{{"a.hcl:4,30", "Invalid fair_share_reclaim_above",
				"fair_share_reclaim_above must be 0 (off) or a number of at least 1 (times a tenant's fair share); got 0.5."}},
		},
		{
			name: "fair-share reclaim without a half-life",
			src:  "tier \"t\" { priority = 5 }\npreemption {\n  fair_share_reclaim_above = 1.5\n}\n",
			want: []wantDiag{{"a.hcl:3,30", "fair_share_reclaim_above needs fair_share_half_life",
				`fair_share_reclaim_above reclaims from tenants by their decayed use of borrowed GPUs, which only fair_share_half_life accounts: set it (e.g. "24h"), or fair_share_reclaim_above to 0.`}},
		},
		{
			name: "repeated owner is a warning",
			src:  "tier \"t\" { priority = 5 }\npool \"p\" { owners = [\"t\", \"t\"] }\n",
			want: []wantDiag{{"a.hcl:2,27", "Repeated tier", `Tier "t" is listed more than once.`}},
		},
		{
			name: "empty pool",
			src:  "tier \"t\" { priority = 5 }\npool \"p\" {\n  node_pool = \"\"\n}\n",
			want: []wantDiag{{"a.hcl:3,15", "Empty pool", `Pool "p" names neither a node pool nor GPU models`}},
		},

		// Durations and signals.
		{
			name: "bad duration",
			src:  "tier \"t\" { priority = 5 }\npreemption {\n  min_runtime = \"ten minutes\"\n}\n",
			want: []wantDiag{{"a.hcl:3,17", "Invalid duration", `The value of "min_runtime" must be a duration such as "90s", "15m" or "1h30m", not "ten minutes".`}},
		},
		{
			name: "duration without a unit",
			src:  "tier \"t\" { priority = 5 }\npool \"p\" {\n  owners = [\"t\"]\n  grace = 30\n}\n",
			want: []wantDiag{{"a.hcl:4,11", "Invalid duration", `not "30"`}},
		},
		{
			name: "negative duration",
			src:  "tier \"t\" { priority = 5 }\npreemption {\n  promote {\n    after_wait = \"-1h\"\n  }\n}\n",
			want: []wantDiag{{"a.hcl:4,18", "Negative duration", `after_wait must not be negative; got "-1h".`}},
		},
		{
			name: "negative preempt_grace",
			src:  "tier \"t\" {\n  priority = 5\n  preempt_grace = \"-30s\"\n}\n",
			want: []wantDiag{{"a.hcl:3,19", "Negative duration", `preempt_grace must not be negative; got "-30s".`}},
		},
		{
			name: "negative max_snooze",
			src:  "tier \"t\" { priority = 5 }\nidle \"nb\" {\n  max_snooze = \"-2h\"\n}\n",
			want: []wantDiag{{"a.hcl:3,16", "Negative duration", `max_snooze must not be negative; got "-2h".`}},
		},
		{
			name: "max_snooze without a unit",
			src:  "tier \"t\" { priority = 5 }\nidle \"nb\" {\n  max_snooze = 2\n}\n",
			want: []wantDiag{{"a.hcl:3,16", "Invalid duration", `not "2"`}},
		},
		{
			name: "preempt_grace without a unit",
			src:  "tier \"t\" {\n  priority = 5\n  preempt_grace = 30\n}\n",
			want: []wantDiag{{"a.hcl:3,19", "Invalid duration", `The value of "preempt_grace" must be a duration such as "90s", "15m" or "1h30m", not "30".`}},
		},
		{
			name: "bad signal with a suggestion",
			src:  "tier \"t\" { priority = 5 }\npreemption {\n  checkpoint_signal = \"SIGUSR3\"\n}\n",
			want: []wantDiag{{"a.hcl:3,23", "Invalid signal", `"SIGUSR3" is not a Linux signal name; use a name such as "SIGUSR1" or "SIGTERM", or "none" for no checkpoint signal. Did you mean "SIGUSR1"?`}},
		},
		{
			name: "a Linux signal Nomad cannot send",
			src:  "tier \"t\" { priority = 5 }\npreemption { checkpoint_signal = \"pwr\" }\n",
			want: []wantDiag{{"a.hcl:2,34", "Signal Nomad cannot send", "Nomad cannot send SIGPWR: its raw_exec and exec drivers would interrupt victims with SIGINT instead"}},
		},
		{
			name: "uncatchable signal is a warning",
			src:  "tier \"t\" { priority = 5 }\npreemption { checkpoint_signal = \"kill\" }\n",
			want: []wantDiag{{"a.hcl:2,34", "Signal cannot be caught", "A job cannot handle SIGKILL"}},
		},

		// Idle rules.
		{
			name: "threshold above 100",
			src:  "tier \"t\" { priority = 5 }\nidle \"i\" {\n  threshold = 150\n}\n",
			want: []wantDiag{{"a.hcl:3,15", "Invalid threshold", `The threshold of idle rule "i" is a GPU utilisation percentage and must be between 0 and 100; got 150.`}},
		},
		{
			name: "negative threshold",
			src:  "tier \"t\" { priority = 5 }\nidle \"i\" { threshold = -0.5 }\n",
			want: []wantDiag{{"a.hcl:2,24", "Invalid threshold", "got -0.5."}},
		},
		{
			name: "bad mode",
			src:  "tier \"t\" { priority = 5 }\nidle \"i\" {\n  mode = \"presure\"\n}\n",
			want: []wantDiag{{"a.hcl:3,10", "Invalid idle mode", `The mode of idle rule "i" must be "pressure" or "always"; got "presure". Did you mean "pressure"?`}},
		},
		{
			name: "bad action",
			src:  "tier \"t\" { priority = 5 }\nidle \"i\" {\n  action = \"kill\"\n}\n",
			want: []wantDiag{{"a.hcl:3,12", "Invalid idle action", `The action of idle rule "i" must be "stop" or "requeue"; got "kill".`}},
		},
		{
			name: "idle rule names a non-preemptible tier",
			src:  "tier \"serve\" {\n  priority = 90\n  preemptible = false\n}\nidle \"i\" {\n  tiers = [\"serve\"]\n}\n",
			want: []wantDiag{{"a.hcl:6,12", "Idle rule names a non-preemptible tier", `Tier "serve" is not preemptible, and releasing idle GPUs preempts the job holding them.`}},
		},

		// Defaults and preemption counts.
		{
			name: "meta key used twice",
			src:  "tier \"t\" { priority = 5 }\ndefaults {\n  gang_meta_key = \"steward.tier\"\n}\n",
			want: []wantDiag{{"a.hcl:3,19", "Meta key used twice", `gang_meta_key is "steward.tier", the same key as tier_meta_key;`}},
		},
		{
			name: "empty meta key",
			src:  "tier \"t\" { priority = 5 }\ndefaults { checkpoint_meta_key = \"\" }\n",
			want: []wantDiag{{"a.hcl:2,34", "Empty meta key", "checkpoint_meta_key must name a job meta key."}},
		},
		{
			name: "negative max per job per hour",
			src:  "tier \"t\" { priority = 5 }\npreemption { max_per_job_per_hour = -1 }\n",
			want: []wantDiag{{"a.hcl:2,37", "Invalid max_per_job_per_hour", "max_per_job_per_hour must be 0 or more; got -1. Use 0 for no cap."}},
		},
		{
			name: "negative after_preemptions",
			src:  "tier \"t\" { priority = 5 }\npreemption {\n  promote { after_preemptions = -3 }\n}\n",
			want: []wantDiag{{"a.hcl:3,33", "Invalid after_preemptions", "got -3."}},
		},
		{
			name: "boost too large",
			src:  "tier \"t\" { priority = 5 }\npreemption {\n  promote { boost = 100 }\n}\n",
			want: []wantDiag{{"a.hcl:3,21", "Invalid boost", "must be between 0 and 99; got 100."}},
		},

		// Idle warnings and notify blocks.
		{
			name: "warn_before not shorter than after",
			src:  "tier \"t\" { priority = 5 }\nidle \"i\" {\n  after = \"10m\"\n  warn_before = \"10m\"\n}\n",
			want: []wantDiag{{"a.hcl:4,17", "Warning not before the release", "warn_before must be shorter than after"}},
		},
		{
			name: "negative warn_before",
			src:  "tier \"t\" { priority = 5 }\nidle \"i\" { warn_before = \"-1m\" }\n",
			want: []wantDiag{{"a.hcl:2,26", "Negative duration", `warn_before must not be negative; got "-1m".`}},
		},
		{
			name: "notify without a URL",
			src:  "tier \"t\" { priority = 5 }\nnotify \"ops\" {\n  events = [\"preempt\"]\n}\n",
			want: []wantDiag{{"a.hcl:2,1", "No webhook URL", "needs url, or url_env"}},
		},
		{
			name: "notify with url and url_env",
			src:  "tier \"t\" { priority = 5 }\nnotify \"ops\" {\n  url = \"https://h.example.com/\"\n  url_env = \"HOOK\"\n}\n",
			want: []wantDiag{{"a.hcl:4,13", "Two webhook URLs", "give one"}},
		},
		{
			name: "notify URL that is not http",
			src:  "tier \"t\" { priority = 5 }\nnotify \"ops\" { url = \"ftp://h.example.com/\" }\n",
			want: []wantDiag{{"a.hcl:2,22", "Invalid webhook URL", "must start with http:// or https://"}},
		},
		{
			name: "notify URL with credentials",
			src:  "tier \"t\" { priority = 5 }\nnotify \"ops\" { url = \"https://me:secret@h.example.com/\" }\n",
			want: []wantDiag{{"a.hcl:2,22", "Invalid webhook URL", "holds credentials"}},
		},
		{
			name: "notify ui_url without a host",
			src:  "tier \"t\" { priority = 5 }\nnotify \"ops\" {\n  url = \"https://h.example.com/\"\n  ui_url = \"https://\"\n}\n",
			want: []wantDiag{{"a.hcl:4,12", "Invalid UI address", "names no host"}},
		},
		{
			name: "notify unknown event with a suggestion, and a repeat",
			src:  "tier \"t\" { priority = 5 }\nnotify \"ops\" {\n  url = \"https://h.example.com/\"\n  events = [\"idle_warning\", \"premept\", \"idle_warning\"]\n}\n",
			want: []wantDiag{
				{"a.hcl:4,29", "Unknown event", `There is no event "premept"; events are preempt, migrate, hold, resume, move, idle_reclaim, idle_warning, promote, start, finish. Did you mean "preempt"?`},
				{"a.hcl:4,40", "Repeated event", `Event "idle_warning" is listed more than once.`},
			},
		},
		{
			name: "notify per_job: a bad recipients pattern and a reserved recipient header",
			src:  "tier \"t\" { priority = 5 }\nnotify \"users\" {\n  url = \"https://h.example.com/\"\n  per_job = true\n  recipient_header = \"Authorization\"\n  recipients = \"[a-z\"\n}\n",
			want: []wantDiag{
				{"a.hcl:5,22", "Reserved header", `recipient_header of notify "users" is Authorization, which a job must not set`},
				{"a.hcl:6,16", "Invalid recipients pattern", `recipients of notify "users" is not a regular expression`},
			},
		},
		{
			name: "notify recipients without per_job",
			src:  "tier \"t\" { priority = 5 }\nnotify \"ops\" {\n  url = \"https://h.example.com/\"\n  recipients = \"[a-z]+\"\n}\n",
			want: []wantDiag{{"a.hcl:4,16", "Recipients without per_job", `recipients of notify "ops" needs per_job = true.`}},
		},
		{
			name: "notify unknown tenant",
			src:  "tier \"t\" { priority = 5 }\ntenant \"research\" {}\nnotify \"ops\" {\n  url = \"https://h.example.com/\"\n  tenants = [\"reserch\"]\n}\n",
			want: []wantDiag{{"a.hcl:5,14", "Unknown tenant", `There is no tenant "reserch". Did you mean "research"?`}},
		},
		{
			name: "notify headers: reserved name, bad env name",
			src:  "tier \"t\" { priority = 5 }\nnotify \"ops\" {\n  url = \"https://h.example.com/\"\n  headers_from_env = { \"idempotency-key\" = \"K\", Authorization = \"1TOKEN\" }\n}\n",
			want: []wantDiag{
				{"a.hcl:4,22", "Invalid environment variable name", `reads header Authorization from "1TOKEN"`},
				{"a.hcl:4,22", "Reserved header", "sets idempotency-key, which Steward sets itself"},
			},
		},
		{
			name: "notify headers not a map",
			src:  "tier \"t\" { priority = 5 }\nnotify \"ops\" {\n  url = \"https://h.example.com/\"\n  headers_from_env = [\"A\"]\n}\n",
			want: []wantDiag{{"a.hcl:4,22", "Incorrect attribute value type", `"headers_from_env": a map of strings is required.`}},
		},
		{
			name: "notify timeout and attempts",
			src:  "tier \"t\" { priority = 5 }\nnotify \"ops\" {\n  url = \"https://h.example.com/\"\n  timeout = \"0s\"\n  attempts = 0\n}\n",
			want: []wantDiag{
				{"a.hcl:4,13", "Invalid timeout", `must be more than 0; got "0s".`},
				{"a.hcl:5,14", "Invalid attempts", "must be 1 or more; got 0."},
			},
		},
		{
			name: "notify defined twice",
			src:  "tier \"t\" { priority = 5 }\nnotify \"ops\" { url = \"https://a.example.com/\" }\nnotify \"ops\" { url = \"https://b.example.com/\" }\n",
			want: []wantDiag{{"a.hcl:3,1", "Duplicate notify", `Notify "ops" already defined at a.hcl:2,1-13`}},
		},

		// Departments.
		{
			name: "department of unknown tenant",
			src:  "tier \"t\" { priority = 5 }\ntenant \"a\" {}\ndepartment \"d\" { tenants = [\"a\", \"b\"] }\n",
			want: []wantDiag{{"a.hcl:3,34", "Unknown tenant", `There is no tenant "b".`}},
		},
		{
			name: "tenant in two departments",
			src:  "tier \"t\" { priority = 5 }\ntenant \"a\" {}\ndepartment \"d\" { tenants = [\"a\"] }\ndepartment \"e\" { tenants = [\"a\"] }\n",
			want: []wantDiag{{"a.hcl:4,29", "Tenant in two departments", `Tenant "a" is already in department "d"`}},
		},
		{
			name: "department reserve below its tenants' reserves",
			src: `tier "t" { priority = 5 }
tenant "a" { reserve = 4 }
tenant "b" { reserve = 6 }
department "d" {
  tenants = ["a", "b"]
  reserve = 8
}
`,
			want: []wantDiag{{"a.hcl:6,13", "Department reserve below its tenants'", "reserves add up to 10 (a 4, b 6)"}},
		},
		{
			name: "department limit below reserve and bad weight",
			src: `tier "t" { priority = 5 }
tenant "a" {}
department "d" {
  tenants = ["a"]
  reserve = 4
  limit   = 2
  weight  = 0
}
`,
			want: []wantDiag{
				{"a.hcl:6,13", "Limit below reserve", `Department "d" has limit 2 but reserve 4`},
				{"a.hcl:7,13", "Invalid weight", `The weight of department "d" must be a number greater than 0; got 0.`},
			},
		},
		{
			name: "department negative limit",
			src:  "tier \"t\" { priority = 5 }\ntenant \"a\" {}\ndepartment \"d\" {\n  tenants = [\"a\"]\n  limit = -1\n}\n",
			want: []wantDiag{{"a.hcl:5,11", "Invalid limit", "limit must be 0 or more; got -1. Leave limit out for no limit."}},
		},
		{
			name: "empty department",
			src:  "tier \"t\" { priority = 5 }\ndepartment \"d\" { tenants = [] }\n",
			want: []wantDiag{{"a.hcl:2,28", "Empty department", `Department "d" lists no tenants`}},
		},
		{
			name: "department defined twice",
			src:  "tier \"t\" { priority = 5 }\ntenant \"a\" {}\ndepartment \"d\" { tenants = [\"a\"] }\ndepartment \"d\" { tenants = [\"a\"] }\n",
			want: []wantDiag{{"a.hcl:4,1", "Duplicate department", `Department "d" already defined at a.hcl:3,1-15`}},
		},

		// All problems are reported, in file order.
		{
			name: "several mistakes",
			src: `defaults { tier = "nope" }
tier "t" { priority = 500 }
tenant "x" {
  reserve = 3
  limit = 1
}
idle "i" { mode = "never" }
`,
			want: []wantDiag{
				{"a.hcl:1,19", "Unknown tier", `There is no tier "nope".`},
				{"a.hcl:2,23", "Invalid priority", "got 500."},
				{"a.hcl:5,11", "Limit below reserve", "has limit 1 but reserve 3"},
				{"a.hcl:7,19", "Invalid idle mode", `got "never".`},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := tt.files
			if files == nil {
				files = []Source{{Name: "a.hcl", Bytes: []byte(tt.src)}}
			}
			p, diags := ParseSources(files...)
			assertDiags(t, diags, tt.want...)
			if diags.HasErrors() != (p == nil) {
				t.Errorf("policy %v with errors %v: want nil exactly when there are errors", p, diags.HasErrors())
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(p *Policy)
		want []string // substrings of the error; none: valid
	}{
		{name: "example is valid", edit: func(*Policy) {}},
		{
			name: "misnamed and nil entries",
			edit: func(p *Policy) {
				p.Tiers["other"] = &Tier{Name: "training", Priority: 5, Preemptible: true}
				p.Tiers["void"] = nil
				p.Tenants["ghost"] = nil
				p.Pools["empty"] = nil
			},
			want: []string{`tier "other": Misnamed tier`, `tier "void": Nil tier`, `tenant "ghost": Nil tenant`, `pool "empty": Nil pool`},
		},
		{
			name: "hand-built departments: nil, tenant in two, reserve too small",
			edit: func(p *Policy) {
				p.Departments["void"] = nil
				p.Departments["ops"] = &Department{Name: "ops", Tenants: []string{"platform", "product", "research"}, Reserve: 6, Limit: Unlimited, Weight: 1}
			},
			want: []string{`department "void": Nil department`,
				`department "ops" tenants[0]: Tenant in two departments: Tenant "platform" is already in department "infra"`,
				`department "ops" reserve: Department reserve below its tenants': Department "ops" has reserve 6, but its tenants' reserves add up to 8 (platform 0, product 4, research 4)`},
		},
		{
			name: "no default tier",
			edit: func(p *Policy) { p.Defaults.Tier = "" },
			want: []string{"defaults tier: No default tier"},
		},
		{
			name: "limit below reserve and a bad signal",
			edit: func(p *Policy) {
				p.Tenants["product"].Limit = 1
				p.Preemption.CheckpointSignal = "usr1" // not normalised
			},
			want: []string{`tenant "product" limit: Limit below reserve`, `preemption checkpoint_signal: Invalid signal`},
		},
		{
			name: "negative limit other than Unlimited",
			edit: func(p *Policy) { p.Tenants["platform"].Limit = -2 },
			want: []string{`tenant "platform" limit: Invalid limit`},
		},
		{
			name: "duplicate idle rule and negative duration",
			edit: func(p *Policy) {
				p.Idle = append(p.Idle, &IdleRule{Name: "notebooks", After: -time.Second, Mode: IdleModeAlways, Action: IdleActionStop})
			},
			want: []string{`idle "notebooks": Duplicate idle`, `idle "notebooks" after: Negative duration`},
		},
		{
			name: "negative preempt_grace",
			edit: func(p *Policy) { p.Tiers["inference"].PreemptGrace = durationPtr(-time.Second) },
			want: []string{`tier "inference" preempt_grace: Negative duration`},
		},
		{
			name: "idle rule naming a non-preemptible tier",
			edit: func(p *Policy) { p.Idle[0].Tiers = []string{"interactive", "build"} },
			want: []string{`idle "notebooks" tiers[1]: Idle rule names a non-preemptible tier`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := examplePolicy()
			tt.edit(p)
			err := p.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	var nilPolicy *Policy
	if nilPolicy.Validate() == nil {
		t.Error("nil policy validated")
	}
}

func TestSuggestions(t *testing.T) {
	known := []string{"inference", "interactive", "training"}
	tests := []struct{ in, want string }{
		{"traning", "training"},
		{"Training", "training"},
		{"inferense", "inference"},
		{"interactiv", "interactive"},
		{"gpu", ""},
		{"t", ""},
		{"batch", ""},
	}
	for _, tt := range tests {
		if got := closest(tt.in, known); got != tt.want {
			t.Errorf("closest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Warnings leave the policy usable.
func TestWarningsKeepPolicy(t *testing.T) {
	p, diags := ParseBytes("a.hcl", []byte("tier \"t\" { priority = 5 }\npreemption { checkpoint_signal = \"SIGSTOP\" }\n"))
	if p == nil || diags.HasErrors() || len(diags) != 1 || diags[0].Severity != hcl.DiagWarning {
		t.Fatalf("got %v, %v; want a policy and one warning", p, diags)
	}
	if p.Preemption.CheckpointSignal != "SIGSTOP" {
		t.Errorf("signal = %q", p.Preemption.CheckpointSignal)
	}
}
