package controller

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
)

// Placeholders keep free GPUs for a beneficiary while its victims
// checkpoint. A preemption often counts on free GPUs beside its victims'
// (7 free and 1 preempted, for an 8-GPU job); the engine sets them aside
// (marks), but Nomad does not know: during the grace it places any job
// that fits there, a new one or one Steward resumed for other GPUs (its
// binpacking prefers the fullest node, which is this one), and when the
// victims stop the beneficiary no longer fits. Nomad CE has no
// reservations, so Steward holds those GPUs with a job of its own: one
// allocation per node and beneficiary, pinned to the node, asking for the
// GPUs and next to no CPU or memory, running a sleep. It lives in Steward's
// namespace, which tenants cannot write, and is purged in the round that
// resumes the beneficiary (the victims' GPUs and the placeholder's free up
// together, and the beneficiary's evaluation is the one waiting for them)
// or when the marks lapse. Its sleep ends by itself when the marks would
// have lapsed, so a controller that dies for good strands no GPU.

// placeholderPrefix starts every placeholder job's ID.
const placeholderPrefix = "steward-hold-"

// Placeholder is a placeholder job as observed: its node and GPUs.
type Placeholder struct {
	ID   string
	Node string
	GPUs int
}

// placeholderWant is a placeholder the marks call for.
type placeholderWant struct {
	id    string
	node  ObservedNode
	gpus  int
	bene  engine.JobRef
	group string
	until time.Time
}

// placeholderID names the placeholder for a beneficiary's group on a node:
// the same every round, so that a round (or a restarted controller) finds
// the one an earlier round registered.
func placeholderID(bene engine.JobRef, group, node string) string {
	sum := sha256.Sum256([]byte(bene.String() + "/" + group + "@" + node))
	return placeholderPrefix + hex.EncodeToString(sum[:6])
}

// wantedPlaceholders are the placeholders the states' marks call for now:
// GPUs set aside for a beneficiary Steward still holds and did not resume
// in this round, not lapsed: free GPUs a preemption counted on
// (Mark.Beside), and GPUs a victim gave back while other victims still
// drain for the same beneficiary (it is released when the last stops). A new
// one asks for no more GPUs than are free on its node now, in Nomad's
// eyes: the engine may have counted GPUs that are still draining, and a
// placeholder waiting for those would take them from whoever they drain
// for. Once those free, while the marks stand, it grows to hold them
// (nomadmodel.Holds), or Nomad places other work there.
func (ph *placeholders) wantedPlaceholders(r *round) map[string]placeholderWant {
	nodes := map[string]ObservedNode{}
	free := map[string]int{} // GPUs no allocation or placeholder holds
	for _, n := range r.obs.Nodes {
		nodes[n.ID] = n
		free[n.ID] = n.GPUs
	}
	for _, a := range r.obs.Allocs {
		free[a.NodeID] -= len(a.GPUIDs)
	}
	for _, p := range r.obs.Placeholders {
		free[p.Node] -= p.GPUs
	}
	want := map[string]placeholderWant{}
	nodeID := nodeResolver(r.obs.Nodes)
	var placing []engine.Earmark // set aside for work resumed in this round
	for _, st := range ph.states() {
		for _, m := range st.Marks {
			if !r.now.Before(m.Until) {
				continue
			}
			ref, ok := parseJobRef(m.For)
			node, known := nodes[nodeID(m.Node)]
			if !ok || !known {
				continue
			}
			k := jobKey{ref.Namespace, ref.ID}
			if r.resumed[k][m.Group] || (m.Group == "" && len(r.resumed[k]) > 0) {
				placing = append(placing, engine.Earmark{NodeID: node.ID, GPUs: m.GPUs, For: ref, ForGroup: m.Group})
				continue
			}
			if placeholderDriver(node) == "" || !ph.stillHeld(k, m.Group) || ph.states()[k].Paused {
				// (A paused job is held, but waits for nothing.)
				continue
			}
			id := placeholderID(ref, m.Group, node.ID)
			w := want[id]
			w.id, w.node, w.bene, w.group = id, node, ref, m.Group
			w.gpus += m.GPUs
			w.until = later(w.until, m.Until)
			want[id] = w
		}
	}
	sizePlaceholders(r, want, free, placing)
	return want
}

// sizePlaceholders sets the GPUs each wanted placeholder is to hold, out
// of free (by node: GPUs no allocation or placeholder holds), and drops
// those with nothing to hold. placing: the marks of work resumed in this
// round.
func sizePlaceholders(r *round, want map[string]placeholderWant, free map[string]int, placing []engine.Earmark) {
	// Nomad places the work resumed in this round on the GPUs set aside
	// for it, up to what it asks for: a placeholder for other work must
	// not take them too (nomadmodel.PlacingMarks). Its own placeholder is
	// purged in this round: what that held is free but for this.
	purged := map[string]bool{}
	for _, m := range placing {
		id := placeholderID(m.For, m.ForGroup, m.NodeID)
		if p, ok := r.obs.Placeholders[id]; ok && !purged[id] {
			purged[id] = true
			free[p.Node] += p.GPUs
		}
	}
	resumes := indexResumes(r.plan) // once per round, not once per mark
	for n, g := range nomadmodel.PlacingMarks(placing, func(engine.Earmark) bool { return true }, func(m engine.Earmark) int {
		return resumes.gpus(m.For, m.ForGroup)
	}) {
		free[n] -= g
	}
	// Each placeholder keeps what it holds and takes what is free of its
	// marks now (nomadmodel.Holds): GPUs promised while still draining
	// are held once they free. One not placed yet asks for what it asked.
	ids := sortedIDs(want)
	hs := make([]nomadmodel.Placeholder, len(ids))
	for i, id := range ids {
		hs[i] = nomadmodel.Placeholder{Node: want[id].node.ID, Want: want[id].gpus}
		if p, registered := r.obs.Placeholders[id]; registered {
			hs[i].Held = p.GPUs
			if p.Node == "" {
				hs[i].Held = hs[i].Want
			}
		}
	}
	for i, g := range nomadmodel.Holds(hs, free) {
		w := want[ids[i]]
		if g <= 0 {
			delete(want, ids[i]) // nothing free to hold
			continue
		}
		w.gpus = g
		want[ids[i]] = w
	}
}

// resumeIndex is the GPUs a plan resumes, by job and group: read once
// per mark placing resumed work, it is built once per round rather than
// each mark scanning the plan's actions.
type resumeIndex map[engine.JobRef]map[string]int

// indexResumes indexes the plan's Resume actions; an empty index when
// there is no plan.
func indexResumes(plan *engine.Plan) resumeIndex {
	idx := resumeIndex{}
	if plan == nil {
		return idx
	}
	for _, a := range plan.Actions {
		if a.Kind != engine.Resume {
			continue
		}
		if idx[a.Job] == nil {
			idx[a.Job] = map[string]int{}
		}
		idx[a.Job][a.Group] += a.GPUs
	}
	return idx
}

// gpus is the GPUs the plan resumes of a job's group ("": all its
// groups), 0 when it resumes none.
func (idx resumeIndex) gpus(ref engine.JobRef, group string) int {
	if group != "" {
		return idx[ref][group]
	}
	g := 0
	for _, n := range idx[ref] {
		g += n
	}
	return g
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// stillHeld reports whether Steward holds allocations of a job's group
// ("": any group).
func (ph *placeholders) stillHeld(k jobKey, group string) bool {
	st := ph.states()[k]
	if st == nil || group != "" {
		return st != nil && st.holds(group)
	}
	for g := range st.Held {
		if st.holds(g) {
			return true
		}
	}
	return false
}

// syncPlaceholders registers the placeholders the marks call for and
// purges the rest, after the round's actions (a resume in this round
// purges its beneficiary's).
func (ph *placeholders) syncPlaceholders(ctx context.Context, r *round) {
	want := ph.wantedPlaceholders(r)
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		w := want[id]
		if p, ok := r.obs.Placeholders[id]; ok {
			// Registered by an earlier round (placed or still pending):
			// registering it again would only start a new version.
			if p.GPUs > w.gpus || r.unmarked[id] {
				// It may hold GPUs no longer set aside (given to
				// urgent work, Plan.Unmarked): purged now, registered
				// again next round for what is still set aside.
				ph.purgePlaceholder(ctx, r, id)
				continue
			}
			if p.Node == "" || p.GPUs >= w.gpus {
				continue
			}
			// It holds fewer GPUs than are set aside for its
			// beneficiary, and more of them are free now: GPUs
			// promised while still draining. Registered again with
			// them: Nomad replaces its allocation in one plan, on
			// the GPUs it held and those, or keeps it where they
			// were taken meanwhile.
			ph.log().Info("placeholder grows", "job", id, "for", w.bene.String(), "node", w.node.Name, "from", p.GPUs, "gpus", w.gpus)
		}
		job := ph.placeholderJob(w, r.now)
		if err := ph.nomad().RegisterJob(ctx, job); err != nil {
			ph.log().Error("register placeholder", "job", id, "for", w.bene.String(), "node", w.node.Name, "error", err)
			r.failed++
			continue
		}
		ph.log().Info("placeholder registered", "job", id, "for", w.bene.String(), "node", w.node.Name, "gpus", w.gpus,
			"until", w.until.Format(time.RFC3339))
	}
	for _, id := range sortedIDs(r.obs.Placeholders) {
		if _, ok := want[id]; ok {
			continue
		}
		ph.purgePlaceholder(ctx, r, id)
	}
}

func (ph *placeholders) purgePlaceholder(ctx context.Context, r *round, id string) {
	if err := ph.nomad().PurgeJob(ctx, ph.cfg().StateNamespace, id); err != nil {
		ph.log().Error("purge placeholder", "job", id, "error", err)
		r.failed++
		return
	}
	ph.log().Info("placeholder purged", "job", id)
}

func sortedIDs[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// placeholderJob is the job that holds w's GPUs: pinned to the node, no
// restarts or rescheduling, a sleep that ends when the marks would lapse.
func (ph *placeholders) placeholderJob(w placeholderWant, now time.Time) *api.Job {
	secs := int(w.until.Sub(now)/time.Second) + 1
	task := placeholderTask(placeholderDriver(w.node), cmp.Or(ph.cfg().PlaceholderImage, DefaultPlaceholderImage), secs)
	task.Resources = &api.Resources{CPU: ptr(1), MemoryMB: ptr(10),
		Devices: []*api.RequestedDevice{{Name: "gpu", Count: ptr(uint64(w.gpus))}}}
	pool := w.node.NodePool
	if pool == "" {
		pool = "default"
	}
	reason := fmt.Sprintf("holds %d free GPUs on node %s for %s while the work preempted for it checkpoints; purged when it resumes",
		w.gpus, w.node.Name, w.bene)
	return &api.Job{
		ID: ptr(w.id), Name: ptr(w.id), Namespace: ptr(ph.cfg().StateNamespace), Type: ptr(api.JobTypeBatch),
		Datacenters: []string{"*"}, NodePool: ptr(pool),
		Meta: map[string]string{"steward.placeholder_for": w.bene.String(), "steward.placeholder_group": w.group,
			"steward.reason": reason},
		Constraints: []*api.Constraint{{LTarget: "${node.unique.id}", Operand: "=", RTarget: w.node.ID}},
		TaskGroups: []*api.TaskGroup{{
			Name: ptr("hold"), Count: ptr(1),
			RestartPolicy:    &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)},
			Tasks:            []*api.Task{task},
		}},
	}
}

func ptr[T any](v T) *T { return &v }

// placeholders owns the placeholder jobs that hold freed GPUs for the work
// they are earmarked for: which the marks call for, and registering and
// purging them. It reads the jobs' states from the store.
type placeholders struct {
	*stateStore
}
