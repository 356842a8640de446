package policy

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// String returns the policy as HCL; see Format.
func (p *Policy) String() string {
	var b strings.Builder
	_ = p.Format(&b) // a strings.Builder does not fail
	return b.String()
}

// Format writes the policy as HCL native syntax with every default spelled
// out, so a person sees what Steward will do. The output parses back into
// an equal Policy (Files aside). Blocks come in a fixed order: defaults,
// tiers by priority (highest first) then name, tenants, departments, pools, idle rules in
// their order of application, preemption. p must be valid (see Validate):
// Format does not check it.
func (p *Policy) Format(w io.Writer) error {
	f := hclwrite.NewEmptyFile()
	root := f.Body()
	if len(p.Files) > 0 {
		comment(root, "Resolved from "+strings.Join(p.Files, ", ")+", with every default filled in.")
	}

	d := root.AppendNewBlock(blockDefaults, nil).Body()
	setString(d, "tier", p.Defaults.Tier)
	setString(d, "tier_meta_key", p.Defaults.TierMetaKey)
	setString(d, "gang_meta_key", p.Defaults.GangMetaKey)
	setString(d, "checkpoint_meta_key", p.Defaults.CheckpointMetaKey)
	if len(p.Defaults.UnnamedTiers) > 0 {
		setStrings(d, "unnamed_tiers", p.Defaults.UnnamedTiers)
	} else {
		comment(d, "unnamed_tiers = [] lets namespaces no tenant block names use "+p.Defaults.Tier+" alone.")
	}

	for _, name := range p.TierNames() {
		t := p.Tiers[name]
		root.AppendNewline()
		b := root.AppendNewBlock(blockTier, []string{name}).Body()
		// preempt_grace is written only when set, so that the output reads
		// back into the same policy (and follows a later change of
		// preemption.grace); the comment says what applies instead.
		if t.PreemptGrace == nil {
			comment(b, "preempt_grace is left out: victims freed for its work get preemption.grace ("+
				FormatDuration(p.Preemption.Grace)+", or a pool's grace).")
		}
		if !t.Preemptible && t.BeyondReserve == "" {
			comment(b, "beyond_reserve is left out: \"run\", its work runs beyond its tenant's reserve, preemptible there by reserve reclaims.")
		}
		b.SetAttributeValue("priority", cty.NumberIntVal(int64(t.Priority)))
		b.SetAttributeValue("preemptible", cty.BoolVal(t.Preemptible))
		if t.PreemptGrace != nil {
			setString(b, "preempt_grace", FormatDuration(*t.PreemptGrace))
		}
		if len(t.PreemptsReserved) > 0 { // left out: reserves protect every tier
			setStrings(b, "preempts_reserved", t.PreemptsReserved)
		}
		if t.BeyondReserve != "" { // written only when set, as preempt_grace
			setString(b, "beyond_reserve", string(t.BeyondReserve))
		}
		if len(t.Pools) > 0 {
			setStrings(b, "pools", t.Pools)
		}
	}

	for _, name := range p.TenantNames() {
		t := p.Tenants[name]
		root.AppendNewline()
		b := root.AppendNewBlock(blockTenant, []string{name}).Body()
		// Comments go first: one between attributes would break hclwrite's
		// alignment of the "=" signs.
		if t.Limit == Unlimited {
			comment(b, "limit is left out: no limit.")
		}
		if len(t.Tiers) == 0 {
			comment(b, "tiers = [] allows every tier.")
		}
		// default_tier is written only when set, so that the output reads
		// back into the same policy; the comment says what it resolves to.
		if t.DefaultTier == "" {
			which := "jobs that name no tier"
			if len(t.Tiers) > 0 {
				which += ", or one the tenant may not use,"
			}
			comment(b, "default_tier is left out: "+which+" run as "+p.TenantDefaultTier(t)+".")
		}
		if fixed := p.nonPreemptibleTiers(t); len(fixed) > 0 {
			var wait, run []string
			for _, name := range fixed {
				if p.Tiers[name].WaitsBeyondReserve() {
					wait = append(wait, name)
				} else {
					run = append(run, name)
				}
			}
			if len(wait) > 0 {
				comment(b, fmt.Sprintf("Not preemptible, so run only within the reserve of %d GPUs: %s.",
					t.Reserve, strings.Join(wait, ", ")))
			}
			if len(run) > 0 {
				comment(b, fmt.Sprintf("Not preemptible within the reserve of %d GPUs, beyond it by reserve reclaims alone: %s.",
					t.Reserve, strings.Join(run, ", ")))
			}
		}
		setString(b, "namespace", t.Namespace)
		b.SetAttributeValue("reserve", cty.NumberIntVal(int64(t.Reserve)))
		if t.Limit != Unlimited {
			b.SetAttributeValue("limit", cty.NumberIntVal(int64(t.Limit)))
		}
		b.SetAttributeValue("weight", cty.NumberFloatVal(t.Weight))
		setStrings(b, "tiers", t.Tiers)
		if t.DefaultTier != "" {
			setString(b, "default_tier", t.DefaultTier)
		}
		if len(t.Pools) > 0 {
			setStrings(b, "pools", t.Pools)
		}
		pools := make([]string, 0, len(t.Quotas))
		for p := range t.Quotas {
			pools = append(pools, p)
		}
		slices.Sort(pools)
		for _, p := range pools {
			q := t.Quotas[p]
			qb := b.AppendNewBlock(blockPool, []string{p}).Body()
			qb.SetAttributeValue("reserve", cty.NumberIntVal(int64(q.Reserve)))
			if q.Limit != Unlimited {
				qb.SetAttributeValue("limit", cty.NumberIntVal(int64(q.Limit)))
			}
		}
	}

	for _, name := range p.DepartmentNames() {
		dp := p.Departments[name]
		root.AppendNewline()
		b := root.AppendNewBlock(blockDepartment, []string{name}).Body()
		if dp.Limit == Unlimited {
			comment(b, "limit is left out: no limit on its tenants together.")
		}
		setStrings(b, "tenants", dp.Tenants)
		b.SetAttributeValue("reserve", cty.NumberIntVal(int64(dp.Reserve)))
		if dp.Limit != Unlimited {
			b.SetAttributeValue("limit", cty.NumberIntVal(int64(dp.Limit)))
		}
		b.SetAttributeValue("weight", cty.NumberFloatVal(dp.Weight))
	}

	for _, name := range p.PoolNames() {
		pl := p.Pools[name]
		root.AppendNewline()
		b := root.AppendNewBlock(blockPool, []string{name}).Body()
		if pl.NodePool == "" {
			comment(b, "node_pool is left out: every node pool.")
		} else {
			setString(b, "node_pool", pl.NodePool)
		}
		setStrings(b, "models", pl.Models)
		setStrings(b, "owners", pl.Owners)
		if pl.Order != PoolOrderDefault {
			setString(b, "order", string(pl.Order))
		}
		setString(b, "grace", FormatDuration(pl.Grace))
	}

	for _, r := range p.Idle {
		root.AppendNewline()
		b := root.AppendNewBlock(blockIdle, []string{r.Name}).Body()
		if len(r.Tiers) == 0 {
			comment(b, "tiers = [] covers every preemptible tier.")
		}
		if len(r.Tenants) == 0 {
			comment(b, "tenants = [] covers every tenant.")
		}
		setStrings(b, "tiers", r.Tiers)
		setStrings(b, "tenants", r.Tenants)
		b.SetAttributeValue("threshold", cty.NumberFloatVal(r.Threshold))
		setString(b, "after", FormatDuration(r.After))
		setString(b, "mode", string(r.Mode))
		setString(b, "action", string(r.Action))
		setString(b, "max_snooze", FormatDuration(r.MaxSnooze))
		setString(b, "warn_before", FormatDuration(r.WarnBefore))
	}

	formatNotify(root, p)

	root.AppendNewline()
	pb := root.AppendNewBlock(blockPreemption, nil).Body()
	pr := p.Preemption
	setString(pb, "min_runtime", FormatDuration(pr.MinRuntime))
	setString(pb, "grace", FormatDuration(pr.Grace))
	signal := pr.CheckpointSignal
	if signal == "" {
		signal = CheckpointNone
	}
	setString(pb, "checkpoint_signal", signal)
	pb.SetAttributeValue("max_per_job_per_hour", cty.NumberIntVal(int64(pr.MaxPerJobPerHour)))
	pb.SetAttributeValue("max_per_job", cty.NumberIntVal(int64(pr.MaxPerJob)))
	order := pr.ResumeOrder
	if order == "" {
		order = DefaultResumeOrder
	}
	setString(pb, "resume_order", string(order))
	setString(pb, "fair_share_half_life", FormatDuration(pr.FairShareHalfLife))
	pb.SetAttributeValue("fair_share_reclaim_above", cty.NumberFloatVal(pr.FairShareReclaimAbove))
	pb.AppendNewline()
	prb := pb.AppendNewBlock(blockPromote, nil).Body()
	prb.SetAttributeValue("after_preemptions", cty.NumberIntVal(int64(pr.Promote.AfterPreemptions)))
	setString(prb, "after_wait", FormatDuration(pr.Promote.AfterWait))
	prb.SetAttributeValue("boost", cty.NumberIntVal(int64(pr.Promote.Boost)))

	if _, err := w.Write(f.Bytes()); err != nil {
		return fmt.Errorf("writing policy: %w", err)
	}
	return nil
}

// nonPreemptibleTiers lists the non-preemptible tiers a tenant may use,
// highest priority first.
func (p *Policy) nonPreemptibleTiers(t *Tenant) []string {
	var out []string
	for _, name := range p.TierNames() {
		if !p.Tiers[name].Preemptible && t.MayUse(name) {
			out = append(out, name)
		}
	}
	return out
}

func setString(b *hclwrite.Body, name, value string) {
	b.SetAttributeValue(name, cty.StringVal(value))
}

func setStrings(b *hclwrite.Body, name string, values []string) {
	if len(values) == 0 {
		b.SetAttributeValue(name, cty.ListValEmpty(cty.String))
		return
	}
	vals := make([]cty.Value, len(values))
	for i, v := range values {
		vals[i] = cty.StringVal(v)
	}
	b.SetAttributeValue(name, cty.TupleVal(vals))
}

// comment appends a "# ..." line.
func comment(b *hclwrite.Body, text string) {
	text = strings.NewReplacer("\n", " ", "\r", " ").Replace(text)
	b.AppendUnstructuredTokens(hclwrite.Tokens{
		{Type: hclsyntax.TokenComment, Bytes: []byte("# " + text + "\n")},
	})
}

// FormatDuration writes a duration as a person would: "15m" and "1h"
// rather than Go's "15m0s" and "1h0m0s". time.ParseDuration reads it back.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
