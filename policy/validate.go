package policy

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Nomad's own rules for names (nomad/structs), so that a policy cannot name
// a namespace or node pool that Nomad would refuse to create.
var (
	validNamespace = regexp.MustCompile("^[a-zA-Z0-9-]{1,128}$")
	validNodePool  = regexp.MustCompile("^[a-zA-Z0-9-_]{1,128}$")
)

// MaxPromoteBoost is the largest useful boost: it lifts the lowest priority
// to the highest.
const MaxPromoteBoost = MaxPriority - MinPriority

// problem is one way a resolved policy breaks the language's rules.
type problem struct {
	at      where
	warning bool
	summary string
	detail  string
}

// Validate checks a Policy against the rules Parse enforces on files, for
// policies built by hand in tests and simulations. It returns every broken
// rule joined into one error, or nil; warnings are not errors. Validate
// fills in nothing: unlike Parse, it wants Defaults.Tier set.
func (p *Policy) Validate() error {
	if p == nil {
		return errors.New("policy is nil")
	}
	var errs []error
	for _, pr := range check(p, nil) {
		if !pr.warning {
			errs = append(errs, fmt.Errorf("%s: %s: %s", pr.at, pr.summary, pr.detail))
		}
	}
	return errors.Join(errs...)
}

// check finds every problem with a resolved policy. order lists labelled
// blocks in source order (nil for a hand-built policy), so that of two
// blocks in conflict the later one is blamed.
func check(p *Policy, order map[string][]string) []problem {
	c := &checker{p: p, order: order}
	c.defaults()
	c.tiers()
	c.tenants()
	c.departments()
	c.pools()
	c.idle()
	c.preemption()
	c.notifies()
	return c.out
}

type checker struct {
	p     *Policy
	order map[string][]string
	out   []problem
}

func (c *checker) errorf(at where, summary, format string, args ...any) {
	c.out = append(c.out, problem{at: at, summary: summary, detail: fmt.Sprintf(format, args...)})
}

func (c *checker) warnf(at where, summary, format string, args ...any) {
	c.out = append(c.out, problem{at: at, warning: true, summary: summary, detail: fmt.Sprintf(format, args...)})
}

// declared returns the names of one block type in source order when known,
// then any others sorted.
func declared[V any](c *checker, block string, m map[string]V) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range c.order[block] {
		if _, ok := m[n]; ok && !seen[n] {
			out = append(out, n)
			seen[n] = true
		}
	}
	for _, n := range keys(m) {
		if !seen[n] {
			out = append(out, n)
		}
	}
	return out
}

func (c *checker) defaults() {
	d := c.p.Defaults
	switch {
	case len(c.p.Tiers) == 0:
		c.errorf(where{}, "No tiers", "A policy needs at least one tier block: every job is ranked by its tier.")
	case d.Tier == "":
		c.errorf(whereAttr(blockDefaults, "", "tier"), "No default tier", "Defaults.Tier must name the tier of jobs that name none.")
	default:
		c.tierRef(whereAttr(blockDefaults, "", "tier"), d.Tier)
	}
	c.tierRefs(whereAttr(blockDefaults, "", "unnamed_tiers"), d.UnnamedTiers)
	metaKeys := []struct{ attr, value string }{
		{"tier_meta_key", d.TierMetaKey},
		{"gang_meta_key", d.GangMetaKey},
		{"checkpoint_meta_key", d.CheckpointMetaKey},
	}
	for i, k := range metaKeys {
		at := whereAttr(blockDefaults, "", k.attr)
		if k.value == "" {
			c.errorf(at, "Empty meta key", "%s must name a job meta key.", k.attr)
			continue
		}
		if !strings.HasPrefix(k.value, "steward.") {
			// The controller keeps only steward.* meta of each job
			// (controller/bounds.go): a key outside it would never be seen.
			c.errorf(at, "Meta key outside steward.*", "%s is %q: Steward reads only job meta keys that begin with \"steward.\".", k.attr, k.value)
		}
		for _, prev := range metaKeys[:i] {
			if prev.value == k.value {
				c.errorf(at, "Meta key used twice", "%s is %q, the same key as %s; each meta key says something different about a job.",
					k.attr, k.value, prev.attr)
			}
		}
	}
}

func (c *checker) tiers() {
	for _, name := range declared(c, blockTier, c.p.Tiers) {
		t := c.p.Tiers[name]
		if !c.entry(blockTier, name, t == nil, t != nil && t.Name != name) {
			continue
		}
		if t.Priority < MinPriority || t.Priority > MaxPriority {
			c.errorf(whereAttr(blockTier, name, "priority"), "Invalid priority",
				"The priority of tier %q must be between %d and %d, the range of Nomad job priorities; got %d.",
				name, MinPriority, MaxPriority, t.Priority)
		}
		if t.PreemptGrace != nil {
			c.duration(whereAttr(blockTier, name, "preempt_grace"), *t.PreemptGrace)
		}
		c.preemptsReserved(name, t)
		c.beyondReserve(name, t)
		c.precedence(whereAttr(blockTier, name, "pools"), t.Pools)
	}
}

// beyondReserve checks a tier's beyond_reserve: "run" or "wait" ("" is
// the zero value of a hand-built policy: the default).
func (c *checker) beyondReserve(name string, t *Tier) {
	at := whereAttr(blockTier, name, "beyond_reserve")
	switch b := t.BeyondReserve; {
	case b != "" && b != BeyondReserveRun && b != BeyondReserveWait:
		c.errorf(at, "Invalid beyond_reserve", "beyond_reserve of tier %q must be %q or %q; got %q.%s",
			name, BeyondReserveRun, BeyondReserveWait, b,
			didYouMean(string(b), []string{string(BeyondReserveRun), string(BeyondReserveWait)}))
	case b == BeyondReserveWait && t.Preemptible:
		c.warnf(at, "beyond_reserve of a preemptible tier",
			"Tier %q is preemptible: its work is never held to its tenant's reserve, so beyond_reserve = %q does nothing.",
			name, b)
	}
}

// preemptsReserved checks a tier's preempts_reserved: tiers that exist, of
// a lower priority (a tier takes GPUs only from lower ones), and
// preemptible (no reserve can be crossed to reach work that is never a
// victim).
func (c *checker) preemptsReserved(name string, t *Tier) {
	at := whereAttr(blockTier, name, "preempts_reserved")
	c.tierRefs(at, t.PreemptsReserved)
	for i, v := range t.PreemptsReserved {
		switch vt := c.p.Tiers[v]; {
		case vt == nil:
		case vt.Priority >= t.Priority:
			c.errorf(at.at(i), "Tier not below",
				"Tier %q (priority %d) lists %q (priority %d) in preempts_reserved, but a tier preempts only lower tiers; "+
					"list tiers of a priority below %d.", name, t.Priority, v, vt.Priority, t.Priority)
		case !vt.Preemptible:
			c.errorf(at.at(i), "Tier not preemptible",
				"Tier %q lists %q in preempts_reserved, but %q is not preemptible: its work is never a victim, within a reserve or not.",
				name, v, v)
		}
	}
}

func (c *checker) tenants() {
	claimed := map[string]string{} // namespace -> tenant
	for _, name := range declared(c, blockTenant, c.p.Tenants) {
		t := c.p.Tenants[name]
		if !c.entry(blockTenant, name, t == nil, t != nil && t.Name != name) {
			continue
		}
		at := func(attr string) where { return whereAttr(blockTenant, name, attr) }
		switch prev, dup := claimed[t.Namespace]; {
		case !validNamespace.MatchString(t.Namespace):
			c.errorf(at("namespace"), "Invalid namespace",
				"Namespace %q of tenant %q is not a valid Nomad namespace name: use 1 to 128 letters, digits and dashes.",
				t.Namespace, name)
		case dup:
			c.errorf(at("namespace"), "Duplicate namespace",
				"Tenant %q already has namespace %q; a namespace belongs to one tenant.", prev, t.Namespace)
		default:
			claimed[t.Namespace] = name
		}
		c.reserveAndLimit(at, t.Reserve, t.Limit, fmt.Sprintf("Tenant %q has limit %d but reserve %d", name, t.Limit, t.Reserve))
		if !(t.Weight > 0) || math.IsInf(t.Weight, 0) {
			c.errorf(at("weight"), "Invalid weight",
				"The weight of tenant %q must be a number greater than 0; got %g.", name, t.Weight)
		}
		c.tenantTiers(name, t)
		c.quotas(name, t)
		c.precedence(whereAttr(blockTenant, name, "pools"), t.Pools)
	}
}

// tenantTiers checks the tiers a tenant may use and its default tier, and
// warns of non-preemptible tiers it may use but could never run: such work
// runs only within its tenant's reserve.
func (c *checker) tenantTiers(name string, t *Tenant) {
	at := func(attr string) where { return whereAttr(blockTenant, name, attr) }
	c.tierRefs(at("tiers"), t.Tiers)
	if d := t.DefaultTier; d != "" {
		switch _, known := c.p.Tiers[d]; {
		case !known:
			c.tierRef(at("default_tier"), d)
		case !t.MayUse(d):
			c.errorf(at("default_tier"), "Default tier not allowed",
				"default_tier of tenant %q is %q, which is not in its tiers list (%s); its jobs that name no tier, "+
					"or a tier it may not use, run in default_tier, so it must be one the tenant may use.%s",
				name, d, strings.Join(t.Tiers, ", "), didYouMean(d, t.Tiers))
		}
	}
	if t.Reserve != 0 {
		return
	}
	if len(t.Tiers) > 0 {
		for i, tier := range t.Tiers {
			if tr, ok := c.p.Tiers[tier]; ok && tr != nil && tr.WaitsBeyondReserve() {
				c.warnf(at("tiers").at(i), "Non-preemptible tier without a reserve",
					"Tier %q is not preemptible and waits beyond its tenant's reserve (beyond_reserve = \"wait\"); "+
						"tenant %q has reserve 0, so its %s jobs would wait for ever. Give the tenant a reserve or remove the tier.",
					tier, name, tier)
			}
		}
		return
	}
	var fixed []string
	for _, tier := range keys(c.p.Tiers) {
		if tr := c.p.Tiers[tier]; tr != nil && tr.WaitsBeyondReserve() {
			fixed = append(fixed, tier)
		}
	}
	if len(fixed) > 0 {
		c.warnf(at("reserve"), "Non-preemptible tiers without a reserve",
			"Tenant %q may use every tier (it lists no tiers) but has reserve 0, and work of a tier with "+
				"beyond_reserve = \"wait\" runs only within its tenant's reserve: its jobs in %s would wait for ever. List the tiers it may use in tiers, or give it a reserve.",
			name, strings.Join(fixed, ", "))
	}
}

func (c *checker) pools() {
	var owned []string // pools with owners, in order: they may not overlap
	for _, name := range declared(c, blockPool, c.p.Pools) {
		p := c.p.Pools[name]
		if !c.entry(blockPool, name, p == nil, p != nil && p.Name != name) {
			continue
		}
		at := func(attr string) where { return whereAttr(blockPool, name, attr) }
		switch {
		case p.NodePool == "" && len(p.Models) == 0:
			c.errorf(at("node_pool"), "Empty pool",
				"Pool %q names neither a node pool nor GPU models: give node_pool, models, or both.", name)
		case p.NodePool != "" && !validNodePool.MatchString(p.NodePool):
			c.errorf(at("node_pool"), "Invalid node pool",
				"Node pool %q of pool %q is not a valid Nomad node pool name: use 1 to 128 letters, digits, dashes and underscores.",
				p.NodePool, name)
		}
		for i, m := range p.Models {
			if strings.TrimSpace(m) == "" {
				c.errorf(at("models").at(i), "Empty model", "Pool %q lists an empty GPU model.", name)
			}
		}
		c.tierRefs(at("owners"), p.Owners)
		c.duration(at("grace"), p.Grace)
		if len(p.Owners) > 0 && len(p.Models) > 0 {
			c.errorf(at("owners"), "Owners of GPU models",
				"Pool %q has owners and models: capacity is kept for owners by node pool, so a pool with owners names a node_pool "+
					"and no models. Put the models' nodes in a node pool of their own, or leave owners out.", name)
		}
		switch p.Order {
		case PoolOrderDefault, PoolOrderLargestFirst, PoolOrderSmallestFirst, PoolOrderFIFO:
		default:
			orders := []string{string(PoolOrderLargestFirst), string(PoolOrderSmallestFirst), string(PoolOrderFIFO)}
			c.errorf(at("order"), "Invalid pool order",
				"Pool %q has order %q; use %s, or leave it out.%s", name, p.Order, strings.Join(orders, ", "),
				didYouMean(string(p.Order), orders))
		}
		if len(p.Owners) == 0 {
			continue
		}
		for _, prev := range owned {
			if q := c.p.Pools[prev]; overlap(p, q) {
				what, place := "node pool "+strconv.Quote(p.NodePool), at("node_pool")
				if p.NodePool == "" || q.NodePool == "" || len(p.Models) > 0 || len(q.Models) > 0 {
					what, place = "nodes", at("owners")
				}
				c.errorf(place, "Overlapping pools",
					"Pools %q and %q both keep %s for their owners; a node belongs to one pool with owners. "+
						"Leave owners out of one of them, or make their node_pool or models disjoint.", prev, name, what)
			}
		}
		owned = append(owned, name)
	}
}

// overlap reports whether two pools may hold the same node.
func overlap(p, q *Pool) bool {
	if p.NodePool != "" && q.NodePool != "" && p.NodePool != q.NodePool {
		return false
	}
	if len(p.Models) == 0 || len(q.Models) == 0 {
		return true
	}
	for _, m := range p.Models {
		if slices.Contains(q.Models, m) {
			return true
		}
	}
	return false
}

// precedence checks a pool precedence: defined pools, each with a node
// pool (Steward moves work by its node pool), no node pool twice.
func (c *checker) precedence(at where, pools []string) {
	seen := map[string]bool{}
	for i, name := range pools {
		p, ok := c.p.Pools[name]
		switch {
		case !ok:
			c.errorf(at.at(i), "Unknown pool", "Pool %q is not defined.%s", name, didYouMean(name, c.p.PoolNames()))
		case p == nil:
		case p.NodePool == "":
			c.errorf(at.at(i), "Pool without a node pool",
				"Pool %q names no node_pool: a pool precedence moves waiting work from node pool to node pool, "+
					"so each of its pools needs one.", name)
		case seen[p.NodePool]:
			c.errorf(at.at(i), "Node pool listed twice", "Node pool %q comes twice in this pool precedence.", p.NodePool)
		default:
			seen[p.NodePool] = true
		}
	}
}

// quotas checks a tenant's pool blocks: each names a defined pool, with a
// reserve of 0 or more and a limit of at least the reserve.
func (c *checker) quotas(name string, t *Tenant) {
	pools := make([]string, 0, len(t.Quotas))
	for p := range t.Quotas {
		pools = append(pools, p)
	}
	slices.Sort(pools)
	for _, pool := range pools {
		q := t.Quotas[pool]
		at := func(attr string) where { return whereAttr(blockTenant, name, QuotaAttr(pool, attr)) }
		if q == nil {
			c.errorf(at(""), "Nil pool quota", "Tenant %q has a nil quota for pool %q.", name, pool)
			continue
		}
		if _, ok := c.p.Pools[pool]; !ok {
			c.errorf(at(""), "Unknown pool",
				"Tenant %q has a pool %q block, but no pool %q is defined.%s", name, pool, pool, didYouMean(pool, c.p.PoolNames()))
		}
		c.reserveAndLimit(at, q.Reserve, q.Limit,
			fmt.Sprintf("Tenant %q has limit %d but reserve %d in pool %q", name, q.Limit, q.Reserve, pool))
	}
}

// reserveAndLimit checks a reserve (0 or more) and a limit (none, or at
// least the reserve); below says who has which when the limit is lower.
func (c *checker) reserveAndLimit(at func(string) where, reserve, limit int, below string) {
	if reserve < 0 {
		c.out = append(c.out, negativeProblem(at("reserve"), reserve, ""))
	}
	switch {
	case limit < 0 && limit != Unlimited:
		c.out = append(c.out, negativeProblem(at("limit"), limit, " Leave limit out for no limit."))
	case limit != Unlimited && reserve >= 0 && limit < reserve:
		c.errorf(at("limit"), "Limit below reserve",
			"%s; the limit counts reserved GPUs too, so it must be at least the reserve.", below)
	}
}

func (c *checker) idle() {
	seen := map[string]bool{}
	for _, r := range c.p.Idle {
		if r == nil {
			c.errorf(where{block: blockIdle}, "Nil idle rule", "Policy.Idle holds a nil rule.")
			continue
		}
		at := func(attr string) where { return whereAttr(blockIdle, r.Name, attr) }
		switch {
		case r.Name == "":
			c.errorf(at(""), "Empty idle name", "An idle block needs a non-empty name.")
		case seen[r.Name]:
			c.errorf(at(""), "Duplicate idle", "Idle rule %q is defined more than once.", r.Name)
		}
		seen[r.Name] = true
		c.tierRefs(at("tiers"), r.Tiers)
		for i, tier := range r.Tiers {
			if t, ok := c.p.Tiers[tier]; ok && t != nil && !t.Preemptible {
				c.errorf(at("tiers").at(i), "Idle rule names a non-preemptible tier",
					"Tier %q is not preemptible, and releasing idle GPUs preempts the job holding them. "+
						"Remove the tier from idle rule %q or make the tier preemptible.", tier, r.Name)
			}
		}
		c.refs(at("tenants"), blockTenant, r.Tenants, keys(c.p.Tenants))
		if !(r.Threshold >= 0 && r.Threshold <= 100) {
			c.errorf(at("threshold"), "Invalid threshold",
				"The threshold of idle rule %q is a GPU utilisation percentage and must be between 0 and 100; got %g.",
				r.Name, r.Threshold)
		}
		c.duration(at("after"), r.After)
		c.duration(at("max_snooze"), r.MaxSnooze)
		c.duration(at("warn_before"), r.WarnBefore)
		if r.WarnBefore > 0 && r.After >= 0 && r.WarnBefore >= r.After {
			c.errorf(at("warn_before"), "Warning not before the release",
				"warn_before of idle rule %q is %s, but its GPUs go back after %s idle: warn_before must be shorter than after.",
				r.Name, FormatDuration(r.WarnBefore), FormatDuration(r.After))
		}
		if r.Mode != IdleModePressure && r.Mode != IdleModeAlways {
			c.errorf(at("mode"), "Invalid idle mode", "The mode of idle rule %q must be %q or %q; got %q.%s",
				r.Name, IdleModePressure, IdleModeAlways, r.Mode,
				didYouMean(string(r.Mode), []string{string(IdleModePressure), string(IdleModeAlways)}))
		}
		if r.Action != IdleActionStop && r.Action != IdleActionRequeue {
			c.errorf(at("action"), "Invalid idle action", "The action of idle rule %q must be %q or %q; got %q.%s",
				r.Name, IdleActionStop, IdleActionRequeue, r.Action,
				didYouMean(string(r.Action), []string{string(IdleActionStop), string(IdleActionRequeue)}))
		}
	}
}

func (c *checker) preemption() {
	p := c.p.Preemption
	at := func(attr string) where { return whereAttr(blockPreemption, "", attr) }
	c.duration(at("min_runtime"), p.MinRuntime)
	c.duration(at("fair_share_half_life"), p.FairShareHalfLife)
	c.fairShareReclaim(p)
	c.duration(at("grace"), p.Grace)
	switch sig := p.CheckpointSignal; {
	case sig == "":
	case !linuxSignals[sig]:
		suggest := ""
		if s := closestSignal(sig); s != "" {
			suggest = fmt.Sprintf(" Did you mean %q?", s)
		}
		c.errorf(at("checkpoint_signal"), "Invalid signal",
			"%q is not a Linux signal name; use a name such as \"SIGUSR1\" or \"SIGTERM\", or \"none\" for no checkpoint signal.%s",
			sig, suggest)
	case !nomadSignals[sig]:
		c.errorf(at("checkpoint_signal"), "Signal Nomad cannot send",
			"Nomad cannot send %s: its raw_exec and exec drivers would interrupt victims with SIGINT instead, with no checkpoint. Use a signal such as \"SIGUSR1\" or \"SIGTERM\".", sig)
	case uncatchableSignals[sig]:
		c.warnf(at("checkpoint_signal"), "Signal cannot be caught",
			"A job cannot handle %s, so it gets no chance to checkpoint; use \"none\" to stop preempted jobs without a grace period.", sig)
	}
	if p.MaxPerJobPerHour < 0 {
		c.out = append(c.out, negativeProblem(at("max_per_job_per_hour"), p.MaxPerJobPerHour, " Use 0 for no cap."))
	}
	if p.MaxPerJob < 0 {
		c.out = append(c.out, negativeProblem(at("max_per_job"), p.MaxPerJob, " Use 0 for no bound."))
	}
	// "" is the zero value of a hand-built policy: the default.
	if o := p.ResumeOrder; o != "" && o != ResumeOrderPreemptedFirst && o != ResumeOrderLongestWaiting {
		c.errorf(at("resume_order"), "Invalid resume order", "resume_order must be %q or %q; got %q.%s",
			ResumeOrderPreemptedFirst, ResumeOrderLongestWaiting, o,
			didYouMean(string(o), []string{string(ResumeOrderPreemptedFirst), string(ResumeOrderLongestWaiting)}))
	}
	pat := func(attr string) where { return whereAttr(blockPromote, "", attr) }
	if p.Promote.AfterPreemptions < 0 {
		c.out = append(c.out, negativeProblem(pat("after_preemptions"), p.Promote.AfterPreemptions, " Use 0 to never promote by count."))
	}
	c.duration(pat("after_wait"), p.Promote.AfterWait)
	if p.Promote.Boost < 0 || p.Promote.Boost > MaxPromoteBoost {
		c.errorf(pat("boost"), "Invalid boost",
			"boost is added to a job's priority and must be between 0 and %d; got %d.", MaxPromoteBoost, p.Promote.Boost)
	}
}

// entry reports a map entry that is nil or filed under the wrong name,
// which only a hand-built policy can have, and says whether it is usable.
func (c *checker) entry(block, name string, isNil, misnamed bool) bool {
	switch {
	case isNil:
		c.errorf(whereBlock(block, name), "Nil "+block, "The %s %q is nil.", block, name)
		return false
	case misnamed:
		c.errorf(whereBlock(block, name), "Misnamed "+block, "The %s filed under %q has a different Name.", block, name)
	}
	return true
}

// Tier names for references come sorted by name, not by TierNames, which
// would panic on the nil entries a hand-built policy may have.
func (c *checker) tierRef(at where, name string) {
	c.ref(at, blockTier, name, keys(c.p.Tiers))
}

func (c *checker) tierRefs(at where, list []string) {
	c.refs(at, blockTier, list, keys(c.p.Tiers))
}

// refs checks that every name in a list attribute is defined, and warns of
// names listed twice.
func (c *checker) refs(at where, block string, list, known []string) {
	seen := map[string]bool{}
	for i, name := range list {
		if seen[name] {
			c.warnf(at.at(i), "Repeated "+block, "%s %q is listed more than once.", capitalize(block), name)
		}
		seen[name] = true
		c.ref(at.at(i), block, name, known)
	}
}

func (c *checker) ref(at where, block, name string, known []string) {
	if contains(known, name) {
		return
	}
	c.errorf(at, "Unknown "+block, "There is no %s %q.%s", block, name, didYouMean(name, known))
}

func (c *checker) duration(at where, d time.Duration) {
	if d < 0 {
		c.errorf(at, "Negative duration", "%s must not be negative; got %q.", at.attr, FormatDuration(d))
	}
}

// negativeProblem is the problem of a count below 0. It is shared with the
// decoder, which must catch a negative limit before it reads as Unlimited.
func negativeProblem(at where, n int, hint string) problem {
	return problem{
		at:      at,
		summary: "Invalid " + at.attr,
		detail:  fmt.Sprintf("%s must be 0 or more; got %d.%s", at.attr, n, hint),
	}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
