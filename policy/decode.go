package policy

import (
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// The schemas say which blocks and attributes exist; hcl reports anything
// else, with a suggestion for near misses. Required attributes are left to
// hcl too, so that its "Missing required argument" wording is used.
var (
	labelName = []string{"name"}

	rootSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
		{Type: blockDefaults},
		{Type: blockTier, LabelNames: labelName},
		{Type: blockTenant, LabelNames: labelName},
		{Type: blockDepartment, LabelNames: labelName},
		{Type: blockPool, LabelNames: labelName},
		{Type: blockIdle, LabelNames: labelName},
		{Type: blockPreemption},
		{Type: blockNotify, LabelNames: labelName},
	}}
	defaultsSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "tier"}, {Name: "tier_meta_key"}, {Name: "gang_meta_key"}, {Name: "checkpoint_meta_key"}, {Name: "unnamed_tiers"},
	}}
	tierSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "priority", Required: true}, {Name: "preemptible"}, {Name: "preempt_grace"}, {Name: "preempts_reserved"},
		{Name: "pools"}, {Name: "beyond_reserve"},
	}}
	tenantSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "namespace"}, {Name: "reserve"}, {Name: "limit"}, {Name: "weight"},
			{Name: "tiers"}, {Name: "default_tier"}, {Name: "pools"},
		},
		Blocks: []hcl.BlockHeaderSchema{{Type: blockPool, LabelNames: labelName}},
	}
	departmentSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "tenants", Required: true}, {Name: "reserve"}, {Name: "limit"}, {Name: "weight"},
	}}
	quotaSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "reserve"}, {Name: "limit"},
	}}
	poolSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "node_pool"}, {Name: "models"}, {Name: "owners"}, {Name: "grace"}, {Name: "order"},
	}}
	idleSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "tiers"}, {Name: "tenants"}, {Name: "threshold"}, {Name: "after"}, {Name: "mode"}, {Name: "action"},
		{Name: "max_snooze"},
		{Name: "warn_before"},
	}}
	preemptionSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "min_runtime"}, {Name: "grace"}, {Name: "checkpoint_signal"}, {Name: "max_per_job_per_hour"},
			{Name: "max_per_job"}, {Name: "resume_order"}, {Name: "fair_share_half_life"}, {Name: "fair_share_reclaim_above"},
		},
		Blocks: []hcl.BlockHeaderSchema{{Type: blockPromote}},
	}
	promoteSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "after_preemptions"}, {Name: "after_wait"}, {Name: "boost"},
	}}
)

// defaultPolicy is the policy of an empty file: no tiers, tenants, pools or
// idle rules, and every default from policy.go.
func defaultPolicy() *Policy {
	return &Policy{
		Defaults: Defaults{
			TierMetaKey:       DefaultTierMetaKey,
			GangMetaKey:       DefaultGangMetaKey,
			CheckpointMetaKey: DefaultCheckpointMetaKey,
		},
		Tiers:   map[string]*Tier{},
		Tenants: map[string]*Tenant{},
		Pools:   map[string]*Pool{},
		Preemption: Preemption{
			MinRuntime:       DefaultMinRuntime,
			Grace:            DefaultGrace,
			CheckpointSignal: DefaultCheckpointSignal,
			MaxPerJobPerHour: DefaultMaxPerJobPerHour,
			MaxPerJob:        DefaultMaxPerJob,
			ResumeOrder:      DefaultResumeOrder,
			Promote: Promote{
				AfterPreemptions: DefaultPromotePreemption,
				AfterWait:        DefaultPromoteWait,
				Boost:            DefaultPromoteBoost,
			},
		},
	}
}

// decoder turns the blocks of parsed files into one Policy. Blocks from all
// files are merged; it is an error to define a named block twice or a
// singleton block more than once, in one file or across several.
type decoder struct {
	pol   *Policy
	src   *sourceMap
	diags hcl.Diagnostics
	// first holds the header range of the first block seen for each
	// labelled block name and each singleton block type.
	first map[where]hcl.Range
}

func newDecoder() *decoder {
	return &decoder{pol: defaultPolicy(), src: newSourceMap(), first: map[where]hcl.Range{}}
}

// decodeFiles builds the policy of files, which parsed without errors and
// are in the order given. It returns nil and the diagnostics when any error
// was found.
func decodeFiles(files []*hcl.File, names []string) (*Policy, *sourceMap, hcl.Diagnostics) {
	d := newDecoder()
	d.pol.Files = names
	if len(names) > 0 {
		d.src.whole = hcl.Range{Filename: names[0], Start: hcl.InitialPos, End: hcl.InitialPos}
	}
	for _, f := range files {
		content, diags := f.Body.Content(rootSchema)
		d.diags = append(d.diags, diags...)
		for _, b := range content.Blocks {
			d.block(b)
		}
	}
	resolveDefaultTier(d.pol)
	for _, p := range check(d.pol, d.src.order) {
		if d.src.isBroken(p.at) {
			continue
		}
		d.diags = append(d.diags, d.src.diagnostic(p))
	}
	sortDiagnostics(d.diags, names)
	if d.diags.HasErrors() {
		return nil, d.src, d.diags
	}
	return d.pol, d.src, d.diags
}

// block decodes one top-level block into d.pol, unless it duplicates one
// already seen: then it is reported and decoded into a scratch policy, so
// that its own mistakes are reported too.
func (d *decoder) block(b *hcl.Block) {
	name := ""
	if len(b.Labels) > 0 {
		name = b.Labels[0]
		if name == "" {
			d.diags = append(d.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Empty %s name", b.Type),
				Detail:   fmt.Sprintf("A %s block needs a non-empty name.", b.Type),
				Subject:  b.LabelRanges[0].Ptr(),
			})
			return
		}
	}
	key := whereBlock(b.Type, name)
	target := d
	if prev, dup := d.first[key]; dup {
		what := b.Type + " block"
		if name != "" {
			what = fmt.Sprintf("%s %q", b.Type, name)
		}
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Duplicate " + b.Type,
			Detail: fmt.Sprintf("%s already defined at %s; each may be defined once across all policy files.",
				capitalize(what), prev),
			Subject: b.DefRange.Ptr(),
		})
		target = newDecoder()
	} else {
		d.first[key] = b.DefRange
		if name != "" {
			d.src.order[b.Type] = append(d.src.order[b.Type], name)
		}
	}
	target.src.subject[key] = b.DefRange
	switch b.Type {
	case blockDefaults:
		target.defaults(b)
	case blockTier:
		target.tier(b, name)
	case blockTenant:
		target.tenant(b, name)
	case blockDepartment:
		target.department(b, name)
	case blockPool:
		target.pool(b, name)
	case blockIdle:
		target.idle(b, name)
	case blockPreemption:
		target.preemption(b)
	case blockNotify:
		target.notify(b, name)
	}
	if target != d {
		d.diags = append(d.diags, target.diags...)
	}
}

// attrs decodes a block body against schema and returns its attributes.
// Required attributes that are missing are marked broken, so that checks
// do not also complain about the zero value standing in for them.
func (d *decoder) attrs(b *hcl.Block, name string, schema *hcl.BodySchema) (*attrs, *hcl.BodyContent) {
	content, diags := b.Body.Content(schema)
	d.diags = append(d.diags, diags...)
	for _, s := range schema.Attributes {
		if _, ok := content.Attributes[s.Name]; s.Required && !ok {
			d.src.broken[whereAttr(b.Type, name, s.Name)] = true
		}
	}
	return &attrs{block: b.Type, name: name, attrs: content.Attributes, src: d.src}, content
}

func (d *decoder) done(a *attrs) { d.diags = append(d.diags, a.diags...) }

func (d *decoder) defaults(b *hcl.Block) {
	a, _ := d.attrs(b, "", defaultsSchema)
	defer d.done(a)
	a.str("tier", &d.pol.Defaults.Tier)
	a.str("tier_meta_key", &d.pol.Defaults.TierMetaKey)
	a.str("gang_meta_key", &d.pol.Defaults.GangMetaKey)
	a.str("checkpoint_meta_key", &d.pol.Defaults.CheckpointMetaKey)
	a.strings("unnamed_tiers", &d.pol.Defaults.UnnamedTiers)
}

func (d *decoder) tier(b *hcl.Block, name string) {
	a, _ := d.attrs(b, name, tierSchema)
	defer d.done(a)
	t := &Tier{Name: name, Preemptible: true}
	a.integer("priority", &t.Priority)
	a.boolean("preemptible", &t.Preemptible)
	var grace time.Duration
	if a.duration("preempt_grace", &grace) {
		t.PreemptGrace = &grace
	}
	a.strings("preempts_reserved", &t.PreemptsReserved)
	a.strings("pools", &t.Pools)
	var beyond string
	if a.str("beyond_reserve", &beyond) {
		t.BeyondReserve = BeyondReserve(beyond)
	}
	d.pol.Tiers[name] = t
}

func (d *decoder) tenant(b *hcl.Block, name string) {
	a, content := d.attrs(b, name, tenantSchema)
	defer d.done(a)
	t := &Tenant{Name: name, Namespace: name, Limit: Unlimited, Weight: DefaultTenantWeight}
	a.str("namespace", &t.Namespace)
	a.integer("reserve", &t.Reserve)
	// Unlimited is -1, so an explicit negative limit must be caught here:
	// once decoded, "limit = -1" would look like no limit at all.
	if a.integer("limit", &t.Limit) && t.Limit < 0 {
		w := a.where("limit")
		p := negativeProblem(w, t.Limit, " Leave limit out for no limit.")
		a.fail(w, a.attrs["limit"].Expr.Range(), p.summary, p.detail)
	}
	a.number("weight", &t.Weight)
	a.strings("tiers", &t.Tiers)
	a.str("default_tier", &t.DefaultTier)
	a.strings("pools", &t.Pools)
	for _, qb := range content.Blocks {
		d.quota(qb, t)
	}
	d.pol.Tenants[name] = t
}

// quota decodes a pool block inside a tenant block: the tenant's reserve
// and limit in that pool. Its places are the tenant's, prefixed
// `pool "NAME"` (QuotaAttr).
func (d *decoder) quota(b *hcl.Block, t *Tenant) {
	pool := b.Labels[0]
	if pool == "" {
		d.diags = append(d.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Empty pool name",
			Detail: "A pool block inside a tenant names a pool: it needs a non-empty name.", Subject: b.LabelRanges[0].Ptr()})
		return
	}
	at := whereAttr(blockTenant, t.Name, QuotaAttr(pool, ""))
	if _, dup := t.Quotas[pool]; dup {
		d.diags = append(d.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate pool",
			Detail:  fmt.Sprintf("Tenant %q already has a pool %q block; give each pool's reserve and limit once.", t.Name, pool),
			Subject: b.DefRange.Ptr()})
		return
	}
	d.src.subject[at] = b.DefRange
	content, diags := b.Body.Content(quotaSchema)
	d.diags = append(d.diags, diags...)
	a := &attrs{block: blockTenant, name: t.Name, prefix: QuotaAttr(pool, ""), attrs: content.Attributes, src: d.src}
	defer d.done(a)
	q := &Quota{Limit: Unlimited}
	a.integer("reserve", &q.Reserve)
	if a.integer("limit", &q.Limit) && q.Limit < 0 {
		w := a.where("limit")
		p := negativeProblem(w, q.Limit, " Leave limit out for no limit.")
		a.fail(w, a.attrs["limit"].Expr.Range(), p.summary, p.detail)
	}
	if t.Quotas == nil {
		t.Quotas = map[string]*Quota{}
	}
	t.Quotas[pool] = q
}

// QuotaAttr names an attribute of a tenant's pool block where diagnostics
// and Validate name places: `pool "h100" limit`.
func QuotaAttr(pool, attr string) string {
	s := blockPool + " " + strconv.Quote(pool)
	if attr != "" {
		s += " " + attr
	}
	return s
}

func (d *decoder) pool(b *hcl.Block, name string) {
	a, _ := d.attrs(b, name, poolSchema)
	defer d.done(a)
	p := &Pool{Name: name}
	a.strings("models", &p.Models)
	if !a.str("node_pool", &p.NodePool) && len(p.Models) == 0 {
		p.NodePool = name
	}
	a.strings("owners", &p.Owners)
	var order string
	if a.str("order", &order) {
		p.Order = PoolOrder(order)
	}
	a.duration("grace", &p.Grace)
	d.pol.Pools[name] = p
}

func (d *decoder) idle(b *hcl.Block, name string) {
	a, _ := d.attrs(b, name, idleSchema)
	defer d.done(a)
	r := &IdleRule{
		Name:      name,
		Threshold: DefaultIdleThreshold,
		After:     DefaultIdleAfter,
		Mode:      DefaultIdleMode,
		Action:    DefaultIdleAction,
		MaxSnooze: DefaultIdleMaxSnooze,
	}
	a.strings("tiers", &r.Tiers)
	a.strings("tenants", &r.Tenants)
	a.number("threshold", &r.Threshold)
	a.duration("after", &r.After)
	a.duration("max_snooze", &r.MaxSnooze)
	var mode, action string
	if a.str("mode", &mode) {
		r.Mode = IdleMode(mode)
	}
	if a.str("action", &action) {
		r.Action = IdleAction(action)
	}
	a.duration("warn_before", &r.WarnBefore)
	d.pol.Idle = append(d.pol.Idle, r)
}

func (d *decoder) preemption(b *hcl.Block) {
	a, content := d.attrs(b, "", preemptionSchema)
	defer d.done(a)
	p := &d.pol.Preemption
	a.duration("min_runtime", &p.MinRuntime)
	a.duration("grace", &p.Grace)
	a.signal("checkpoint_signal", &p.CheckpointSignal)
	a.integer("max_per_job_per_hour", &p.MaxPerJobPerHour)
	a.integer("max_per_job", &p.MaxPerJob)
	var order string
	if a.str("resume_order", &order) {
		p.ResumeOrder = ResumeOrder(order)
	}
	a.duration("fair_share_half_life", &p.FairShareHalfLife)
	a.number("fair_share_reclaim_above", &p.FairShareReclaimAbove)
	for i, pb := range content.Blocks {
		if i > 0 {
			d.diags = append(d.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate promote",
				Detail: fmt.Sprintf("Promote block already defined at %s; a preemption block may hold one.",
					content.Blocks[0].DefRange),
				Subject: pb.DefRange.Ptr(),
			})
			continue
		}
		d.src.subject[whereBlock(blockPromote, "")] = pb.DefRange
		d.promote(pb)
	}
}

func (d *decoder) promote(b *hcl.Block) {
	a, _ := d.attrs(b, "", promoteSchema)
	defer d.done(a)
	p := &d.pol.Preemption.Promote
	a.integer("after_preemptions", &p.AfterPreemptions)
	a.duration("after_wait", &p.AfterWait)
	a.integer("boost", &p.Boost)
}

// resolveDefaultTier fills in Defaults.Tier when the policy sets none: the
// lowest-priority tier, the first by name among equals. Jobs that name no
// tier are then the first to yield.
func resolveDefaultTier(p *Policy) {
	if p.Defaults.Tier != "" {
		return
	}
	var lowest *Tier
	for _, name := range keys(p.Tiers) {
		if t := p.Tiers[name]; lowest == nil || t.Priority < lowest.Priority {
			lowest = t
		}
	}
	if lowest != nil {
		p.Defaults.Tier = lowest.Name
	}
}

// diagnostic places a problem found on the resolved policy in the source.
func (s *sourceMap) diagnostic(p problem) *hcl.Diagnostic {
	subject, context := s.rangeOf(p.at)
	sev := hcl.DiagError
	if p.warning {
		sev = hcl.DiagWarning
	}
	return &hcl.Diagnostic{Severity: sev, Summary: p.summary, Detail: p.detail, Subject: subject.Ptr(), Context: context}
}
