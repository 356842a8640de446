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
func (mc *metaChecker) checkJobMeta(pol *policy.Policy, obs *Observation) {
	if mc.refused == nil {
		mc.refused = map[jobKey]*refusal{}
	}
	for k, rf := range mc.refused {
		if rf.cleared {
			delete(mc.refused, k)
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
		old := mc.refused[k]
		if old != nil && slices.Equal(old.problems, set.Problems) {
			old.index = j.ModifyIndex
			continue
		}
		mc.refused[k] = &refusal{index: j.ModifyIndex, problems: set.Problems}
		mc.log().Warn("job meta refused: "+strings.Join(set.Problems, "; "), "job", k, "job_version_index", j.ModifyIndex)
		for _, key := range set.RefusedKeys {
			mc.metrics.metaRefused.WithLabelValues(key).Inc()
		}
	}
	for k, rf := range mc.refused {
		if !seen[k] {
			rf.cleared, rf.problems = true, nil
		}
	}
}

// warnings lists the refused meta values for steward status.
func (mc *metaChecker) warnings() []JobWarning {
	var out []JobWarning
	for _, k := range sortedKeys(mc.refused) {
		for _, p := range mc.refused[k].problems {
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

// metaChecker owns what Steward refused of the jobs' meta (refused), kept
// for the jobs' records and `steward status` while it lasts.
type metaChecker struct {
	wiring
	metrics *metrics
	refused map[jobKey]*refusal // jobs whose meta Steward refused in part
}
