package scale

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/nodesim"
)

// blockedEvidence samples, while the window runs, why Nomad keeps work
// blocked (issue 33): the blocked evaluations and what their failed
// placements say (FailedTGAllocs: the dimension exhausted, the nodes
// filtered), the GPUs free as Nomad's scheduler counts them (every
// allocation the client has not reported terminal holds its devices, a
// desired-stop one included) against the GPUs of allocations Nomad was
// asked to stop but the client still runs, and the server's eval broker
// (ready, unacked, blocked). One line a sample to w, for the log directory:
// a diagnosis, not a figure of the summary.
type blockedEvidence struct {
	c     *api.Client
	gpus  int
	nodes []nodesim.NodeInfo // the simulated nodes (the dev agent's own client has no GPUs)
	w     io.Writer
	// stopping holds when each allocation was first seen desired-stop
	// but not client-terminal; longest is the longest such stretch seen.
	stopping map[string]time.Time
	longest  time.Duration
}

// run samples every interval until ctx ends.
func (e *blockedEvidence) run(ctx context.Context, every time.Duration) {
	e.stopping = map[string]time.Time{}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			fmt.Fprintln(e.w, e.sample(now))
		}
	}
}

// sample is one line of evidence.
func (e *blockedEvidence) sample(now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", now.UTC().Format("15:04:05"))
	all := &api.QueryOptions{Namespace: api.AllNamespacesNamespace}

	evals, _, err := e.c.Evaluations().List(&api.QueryOptions{Namespace: api.AllNamespacesNamespace, Filter: `Status == "blocked"`})
	if err != nil {
		return b.String() + " evals: " + err.Error()
	}
	dims, classes := map[string]int{}, map[string]int{}
	var olds []*api.Evaluation
	var old, exhausted, filtered, evaluated, zeroEval int
	var oldest time.Duration
	var oldestJob string
	for _, ev := range evals {
		age := now.Sub(time.Unix(0, ev.CreateTime))
		if age > oldest {
			oldest, oldestJob = age, ev.Namespace+"/"+ev.JobID
		}
		if age < 10*time.Second {
			continue
		}
		old++
		olds = append(olds, ev)
		for _, m := range ev.FailedTGAllocs {
			if m == nil {
				continue
			}
			evaluated += m.NodesEvaluated
			filtered += m.NodesFiltered
			exhausted += m.NodesExhausted
			if m.NodesEvaluated == 0 {
				zeroEval++
			}
			for k, v := range m.DimensionExhausted {
				dims[k] += v
			}
			for k, v := range m.ClassExhausted {
				classes[k] += v
			}
		}
	}
	fmt.Fprintf(&b, " blocked=%d blocked_10s=%d oldest=%s(%s) nodes_evaluated=%d filtered=%d exhausted=%d no_node_evaluated=%d dims=%s",
		len(evals), old, oldest.Round(time.Second), oldestJob, evaluated, filtered, exhausted, zeroEval, counts(dims))

	q := &api.QueryOptions{Namespace: api.AllNamespacesNamespace, Params: map[string]string{"resources": "true"},
		Filter: `ClientStatus == "running" or ClientStatus == "pending"`}
	allocs, _, err := e.c.Allocations().List(q)
	if err != nil {
		return b.String() + " allocs: " + err.Error()
	}
	held, stopping, stoppingAllocs := 0, 0, 0
	seen := map[string]bool{}
	heldOn := map[string]int{} // GPUs held on each node, as Nomad's scheduler counts them
	for _, a := range allocs {
		g := 0
		if a.AllocatedResources != nil {
			for _, tr := range a.AllocatedResources.Tasks {
				for _, dv := range tr.Devices {
					g += len(dv.DeviceIDs)
				}
			}
		}
		held += g
		heldOn[a.NodeID] += g
		if a.DesiredStatus != "run" {
			stopping += g
			stoppingAllocs++
			seen[a.ID] = true
			if _, ok := e.stopping[a.ID]; !ok {
				e.stopping[a.ID] = now
			}
			e.longest = max(e.longest, now.Sub(e.stopping[a.ID]))
		}
	}
	for id := range e.stopping {
		if !seen[id] {
			delete(e.stopping, id)
		}
	}
	fmt.Fprintf(&b, " gpus_free_nomad=%d gpus_free_desired_run=%d stop_pending_allocs=%d stop_pending_gpus=%d stop_pending_longest=%s",
		e.gpus-held, e.gpus-held+stopping, stoppingAllocs, stopping, e.longest)
	// Of the evaluations blocked 10 s or more, those whose allocation
	// would fit on one node's free GPUs now (Nomad's count): work Nomad
	// could place at once, had it got to its evaluation.
	mostFree := 0
	for _, n := range e.nodes {
		mostFree = max(mostFree, len(n.GPUs)-heldOn[n.ID])
	}
	fit := 0
	for _, ev := range olds {
		job, _, err := e.c.Jobs().Info(ev.JobID, &api.QueryOptions{Namespace: ev.Namespace})
		if err != nil || len(job.TaskGroups) == 0 || len(job.TaskGroups[0].Tasks) == 0 {
			continue
		}
		if r := job.TaskGroups[0].Tasks[0].Resources; r != nil && len(r.Devices) > 0 && r.Devices[0].Count != nil && int(*r.Devices[0].Count) <= mostFree {
			fit++
		}
	}
	fmt.Fprintf(&b, " most_free_on_a_node=%d blocked_10s_fit_now=%d", mostFree, fit)

	if ms, _, err := e.c.Operator().MetricsSummary(all); err == nil {
		gs := map[string]int{}
		for _, g := range ms.Gauges {
			if strings.Contains(g.Name, "broker.total_") || strings.Contains(g.Name, "blocked_evals.total_") {
				gs[strings.TrimPrefix(g.Name, "nomad.nomad.")] = int(g.Value)
			}
		}
		fmt.Fprintf(&b, " server=%s", counts(gs))
	}
	return b.String()
}

// counts writes a map of counts in key order: "{a:1 b:2}".
func counts(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// serverBacklog is the evaluations waiting for the server's scheduler: its
// eval broker's ready ones and those pending behind another of their job's.
func serverBacklog(c *api.Client) (int, bool) {
	ms, _, err := c.Operator().MetricsSummary(nil)
	if err != nil {
		return 0, false
	}
	n, found := 0, false
	for _, g := range ms.Gauges {
		switch strings.TrimPrefix(g.Name, "nomad.nomad.") {
		case "broker.total_ready", "broker.total_pending":
			n += int(g.Value)
			found = true
		}
	}
	return n, found
}

// leftToNomad counts the decisions whose own part is shorter than their
// latency: those that had a part Nomad had to place.
func leftToNomad(lat, own []time.Duration) int {
	n := 0
	for i := range lat {
		if i < len(own) && own[i] < lat[i] {
			n++
		}
	}
	return n
}

// blockedEvals counts the evaluations Nomad keeps blocked for want of
// room (-1 when the server does not answer): none when the window opens
// means nothing waits there for Steward to decide.
func blockedEvals(c *api.Client) int {
	evals, _, err := c.Evaluations().List(&api.QueryOptions{Namespace: api.AllNamespacesNamespace, Filter: `Status == "blocked"`})
	if err != nil {
		return -1
	}
	return len(evals)
}
