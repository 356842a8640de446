package controller

import (
	"slices"
	"sort"
	"strings"

	"github.com/gpu-steward/steward/policy"
)

// refusal is what Steward refused of one job's meta (policy.ResolveJob),
// at the job version it was read from.
type refusal struct {
	index    uint64
	problems []string
	// cleared: the job's meta is fine again; its record is rewritten once
	// without the warning, then the entry goes.
	cleared bool
}

// checkJobMeta reads every job's Steward meta keys under the policy. Each
// refusal is logged and counted once per job, and again only when the job's
// owner changes it (or a policy reload changes the verdict): a version of
// the job made by Steward's own scaling repeats nothing. It is kept for the
// job's record and `steward status` while it lasts.
func (c *Controller) checkJobMeta(pol *policy.Policy, obs *Observation) {
	if c.refused == nil {
		c.refused = map[jobKey]*refusal{}
	}
	for k, rf := range c.refused {
		if rf.cleared {
			delete(c.refused, k)
		}
	}
	seen := map[jobKey]bool{}
	for _, k := range sortedKeys(obs.Jobs) {
		j := obs.Jobs[k]
		if j.Stopped {
			continue
		}
		set := pol.ResolveJob(j.Namespace, j.Meta)
		if len(set.Problems) == 0 {
			continue
		}
		seen[k] = true
		old := c.refused[k]
		if old != nil && slices.Equal(old.problems, set.Problems) {
			old.index = j.ModifyIndex
			continue
		}
		c.refused[k] = &refusal{index: j.ModifyIndex, problems: set.Problems}
		c.log.Warn("job meta refused: "+strings.Join(set.Problems, "; "), "job", k, "job_version_index", j.ModifyIndex)
		for _, key := range set.RefusedKeys {
			c.metrics.metaRefused.WithLabelValues(key).Inc()
		}
	}
	for k, rf := range c.refused {
		if !seen[k] {
			rf.cleared, rf.problems = true, nil
		}
	}
}

// warnings lists the refused meta values for steward status.
func (c *Controller) warnings() []JobWarning {
	var out []JobWarning
	for _, k := range sortedKeys(c.refused) {
		for _, p := range c.refused[k].problems {
			out = append(out, JobWarning{Job: k.String(), Problem: p})
		}
	}
	return out
}

func sortedKeys[V any](m map[jobKey]V) []jobKey {
	out := make([]jobKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, k int) bool {
		if out[i].Namespace != out[k].Namespace {
			return out[i].Namespace < out[k].Namespace
		}
		return out[i].ID < out[k].ID
	})
	return out
}
