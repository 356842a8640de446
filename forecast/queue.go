package forecast

import (
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// Entry is one waiting job's place in the queue, as the engine's plan
// leaves it.
type Entry struct {
	Job    engine.JobRef
	Tenant string
	// Tier is the tier it runs as (its meta resolved in its tenant).
	Tier     string
	Priority int
	// GPUs it waits for, all its waiting groups together.
	GPUs int
	// Position counts from 1 in the order the engine serves waiting work
	// (the next it would start is 1); TenantPosition among its tenant's.
	// Of and TenantOf are the queue's lengths.
	Position, Of             int
	TenantPosition, TenantOf int
	// Since is when its longest-waiting group began to wait.
	Since time.Time
	Held  bool
	// Rule and Reason: what keeps it waiting (the first of its groups to
	// wait, in the engine's order).
	Rule   engine.Rule
	Reason string
}

// Queue lists the jobs a plan leaves waiting, in the order the engine
// served them (Plan.Waiting keeps it): the order it would start them in.
func Queue(pol *policy.Policy, snap *engine.Snapshot, plan *engine.Plan) []Entry {
	since := map[engine.JobRef]time.Time{}
	for _, d := range snap.Waiting {
		if t, ok := since[d.Job.Ref]; !ok || d.Since.Before(t) {
			since[d.Job.Ref] = d.Since
		}
	}
	jobs := map[engine.JobRef]engine.Job{}
	for _, d := range snap.Waiting {
		jobs[d.Job.Ref] = d.Job
	}
	var out []Entry
	at := map[engine.JobRef]int{}
	perTenant := map[string]int{}
	for _, w := range plan.Waiting {
		if i, ok := at[w.Job]; ok {
			out[i].GPUs += w.GPUs
			continue
		}
		tenant := pol.TenantOf(w.Job.Namespace)
		job := jobs[w.Job]
		tier, _ := pol.TenantTier(tenant, job.Tier)
		perTenant[tenant.Name]++
		at[w.Job] = len(out)
		out = append(out, Entry{Job: w.Job, Tenant: tenant.Name, Tier: tier, Priority: job.Priority, GPUs: w.GPUs,
			Position: len(out) + 1, TenantPosition: perTenant[tenant.Name], Since: since[w.Job], Held: w.Held,
			Rule: w.Reason.Rule, Reason: w.Reason.Message})
	}
	for i := range out {
		out[i].Of, out[i].TenantOf = len(out), perTenant[out[i].Tenant]
	}
	return out
}
