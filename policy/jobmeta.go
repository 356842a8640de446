package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// JobSettings is what Steward makes of one job under a policy: its tenant
// (from the namespace, never from anything the job says), the tier it runs
// as, whether it is a gang and its checkpoint signal. A job writes its own
// meta, so every value is checked here: a value Steward cannot honour is
// replaced, and Problems says what was wrong and what is used instead, for
// the job's record, `steward status`, `steward job check` and the log.
type JobSettings struct {
	Tenant *Tenant
	// Tier is the tier the job runs as; Requested is its tier meta value
	// ("" when absent).
	Tier      string
	Requested string
	Gang      bool
	// CheckpointSignal is the job's checkpoint signal ("" for none): its
	// own meta override when valid, else the policy's.
	CheckpointSignal string
	// IdleRule is the idle rule that covers the job (IdleRuleFor its tier
	// and tenant); nil when none does.
	IdleRule *IdleRule
	// Recipient is who per-job notify blocks tell about the job (its
	// RecipientMetaKey meta, when valid: ValidRecipient); "" for none.
	Recipient string
	// Problems are the meta values Steward refused, one sentence each:
	// `tier "infrence" is not defined (did you mean inference?): runs as training`.
	Problems []string
	// RefusedKeys are the meta keys whose values were refused, for
	// metrics: one entry per problem, in the same order.
	RefusedKeys []string
}

// ResolveJob reads a job's Steward meta keys in the tenant of its
// namespace. It is pure and never fails: bad values become Problems.
func (p *Policy) ResolveJob(namespace string, meta map[string]string) JobSettings {
	s := JobSettings{Tenant: p.TenantOf(namespace), Requested: meta[p.Defaults.TierMetaKey]}
	var problem string
	s.Tier, problem = p.TenantTier(s.Tenant, s.Requested)
	s.addProblem(p.Defaults.TierMetaKey, problem)
	s.Gang, problem = p.gangOf(meta)
	s.addProblem(p.Defaults.GangMetaKey, problem)
	s.CheckpointSignal, problem = p.checkpointOf(meta)
	s.addProblem(p.Defaults.CheckpointMetaKey, problem)
	s.IdleRule = p.IdleRuleFor(s.Tier, s.Tenant.Name)
	// An empty value names no one (a jobspec variable left at "").
	if r := meta[RecipientMetaKey]; r != "" {
		if why := ValidRecipient(r); why != "" {
			s.addProblem(RecipientMetaKey, fmt.Sprintf("%s is refused (%s): no per-user messages", RecipientMetaKey, why))
		} else {
			s.Recipient = r
		}
	}
	return s
}

func (s *JobSettings) addProblem(key, p string) {
	if p != "" {
		s.Problems = append(s.Problems, p)
		s.RefusedKeys = append(s.RefusedKeys, key)
	}
}

// TenantTier is the tier a job of tenant t runs as when its tier meta value
// is requested, and, when that is not the tier asked for, why ("" when the
// request is honoured or empty). A tier the policy lacks, or one the tenant
// may not use, gives the tenant's default tier.
func (p *Policy) TenantTier(t *Tenant, requested string) (string, string) {
	def := p.TenantDefaultTier(t)
	switch {
	case requested == "":
		return def, ""
	case p.Tiers[requested] == nil:
		hint := ""
		if c := closest(requested, p.TierNames()); c != "" {
			hint = " (did you mean " + c + "?)"
		}
		return def, fmt.Sprintf("tier %q is not defined%s: runs as %s", requested, hint, def)
	case !t.MayUse(requested) && t.Unnamed:
		allowed := "only the default tier, " + def
		if len(p.Defaults.UnnamedTiers) > 0 {
			allowed = "defaults.unnamed_tiers: " + strings.Join(p.Defaults.UnnamedTiers, ", ")
		}
		return def, fmt.Sprintf("tier %s is not allowed in namespace %s, which no tenant block names (%s): runs as %s",
			requested, t.Namespace, allowed, def)
	case !t.MayUse(requested):
		return def, fmt.Sprintf("tier %s is not allowed for tenant %s: runs as %s", requested, t.Name, def)
	}
	return requested, ""
}

// MayUse reports whether the tenant may run work in a tier: every tier
// when its tiers list is empty.
func (t *Tenant) MayUse(tier string) bool {
	return len(t.Tiers) == 0 || contains(t.Tiers, tier)
}

// TenantDefaultTier is the tier of a tenant's jobs that name none (or one
// they may not use): its default_tier; else the policy's default tier when
// the tenant may use it; else the lowest-priority tier it may use.
func (p *Policy) TenantDefaultTier(t *Tenant) string {
	if t.DefaultTier != "" {
		return t.DefaultTier
	}
	if t.MayUse(p.Defaults.Tier) {
		return p.Defaults.Tier
	}
	names := p.TierNames()
	for i := len(names) - 1; i >= 0; i-- {
		if t.MayUse(names[i]) {
			return names[i]
		}
	}
	return p.Defaults.Tier
}

// gangOf reads the gang meta key: true or false as strconv.ParseBool
// reads them ("true", "1", "false", "0"...); anything else is no gang, and
// a problem.
func (p *Policy) gangOf(meta map[string]string) (bool, string) {
	v, ok := meta[p.Defaults.GangMetaKey]
	if !ok || strings.TrimSpace(v) == "" {
		return false, ""
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Sprintf("%s %q is not true or false: not a gang", p.Defaults.GangMetaKey, v)
	}
	return b, ""
}

// checkpointOf reads the checkpoint meta key: a signal name Nomad can
// send (CheckpointSignal) or "none"; anything else keeps the policy's
// signal, and is a problem. So does a Linux signal Nomad cannot send: the
// controller would send it, and raw_exec and exec would interrupt the task
// with SIGINT instead, with no checkpoint.
func (p *Policy) checkpointOf(meta map[string]string) (string, string) {
	def := p.Preemption.CheckpointSignal
	v, ok := meta[p.Defaults.CheckpointMetaKey]
	if !ok || strings.TrimSpace(v) == "" {
		return def, ""
	}
	uses := def
	if uses == "" {
		uses = CheckpointNone
	}
	if _, err := NormalizeSignal(v); err != nil {
		hint := ""
		if c := closestSignal(v); c != "" {
			hint = " (did you mean " + c + "?)"
		}
		return def, fmt.Sprintf("%s %q is not a signal name%s: uses %s", p.Defaults.CheckpointMetaKey, v, hint, uses)
	}
	sig, err := CheckpointSignal(v)
	if err != nil {
		return def, fmt.Sprintf("%s %q is a signal Nomad cannot send (raw_exec and exec would send SIGINT): uses %s",
			p.Defaults.CheckpointMetaKey, v, uses)
	}
	return sig, ""
}
