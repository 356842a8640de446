package controller

import (
	"strings"

	"github.com/gpu-steward/steward/policy"
)

// Reasons are data: the engine writes them for the operator, naming every
// job they concern ("reclaiming 1 for product/notebook-a/work"). Where a
// reason is shown to a tenant — its namespace's status view, its job's
// record, a webhook scoped to tenants — the names of jobs in other
// namespaces are replaced by a neutral phrase, keeping the numbers, so a
// tenant does not learn what other teams run. The operator-wide status and
// the controller's log keep the names.

// otherTenantsJob is what a tenant reads instead of another namespace's job.
const otherTenantsJob = "another tenant's job"

// redactJobs rewrites, in text shown to the viewers of namespace ns, each
// reference "OTHER/job" or "OTHER/job/group" to a job in another known
// namespace to otherTenantsJob. A reference starts at the start of the
// text or after a space or an opening bracket or quote, and runs to the
// next space, comma, semicolon, closing bracket or quote (Nomad job IDs
// hold no spaces); a trailing full stop or colon is the sentence's.
// Words with a slash that are no namespace ("1/2", "nvidia/gpu") stay.
func redactJobs(text, ns string, namespaces map[string]bool) string {
	if !strings.Contains(text, "/") {
		return text
	}
	var b strings.Builder
	for i := 0; i < len(text); {
		if i > 0 && !strings.ContainsRune(" ([{\"'", rune(text[i-1])) {
			b.WriteByte(text[i])
			i++
			continue
		}
		end := i + strings.IndexAny(text[i:]+" ", " ,;)]}\"'")
		ref := strings.TrimRight(text[i:end], ".:")
		other, rest, ok := strings.Cut(ref, "/")
		if !ok || other == ns || rest == "" || !namespaces[other] {
			b.WriteByte(text[i])
			i++
			continue
		}
		b.WriteString(otherTenantsJob)
		i += len(ref)
	}
	return b.String()
}

// knownNamespaces are the namespaces whose jobs a reason may name: the
// policy's tenants', and those of the jobs last observed (usage) and of
// the states kept (store).
func knownNamespaces(pol *policy.Policy, usage *usageStore, store *stateStore) map[string]bool {
	set := map[string]bool{}
	if pol != nil {
		for _, t := range pol.Tenants {
			set[t.Namespace] = true
		}
	}
	if usage == nil {
		return set
	}
	if obs := usage.observation(); obs != nil {
		for k := range obs.Jobs {
			set[k.Namespace] = true
		}
	}
	for k := range store.states() {
		set[k.Namespace] = true
	}
	delete(set, "")
	return set
}

// roundNamespaces is knownNamespaces with the round's jobs, worked out
// once per round: every job's record is redacted with it.
func (p *publisher) roundNamespaces(r *round, pol *policy.Policy) map[string]bool {
	if p.nsRound == r && p.nsSet != nil {
		return p.nsSet
	}
	set := knownNamespaces(pol, p.usage(), p.store)
	if r.obs != nil {
		for k := range r.obs.Jobs {
			set[k.Namespace] = true
		}
	}
	delete(set, "")
	p.nsRound, p.nsSet = r, set
	return set
}
