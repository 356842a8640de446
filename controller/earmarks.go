package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// GPUs freed for a beneficiary are its own until Nomad places it (the
// engine's earmarks.go says why). The controller tells the engine which:
// a draining victim names its beneficiary (Alloc.For, from its Drain), and
// the GPUs a finished preemption gave back, and the free GPUs beside them
// the preemption counted on (Plan.Earmarks), are kept as Marks in the
// victim's state, read back as Snapshot.Earmarks until they expire. The
// engine drops marks whose beneficiary no longer waits.

// Mark is GPUs on a node set aside for a waiting job's group.
type Mark struct {
	Node  string    `json:"node"`
	GPUs  int       `json:"gpus"`
	For   string    `json:"for"` // namespace/job
	Group string    `json:"group,omitempty"`
	Until time.Time `json:"until"`
	// Beside: free GPUs the preemption counted on beside its victims',
	// which a placeholder holds (placeholder.go); else GPUs a victim gave
	// back.
	Beside bool `json:"beside,omitempty"`
}

// Marks are a state's marks, saved grouped by what they are for and
// until when: a gang's preemption sets GPUs aside on each of its nodes for
// the same beneficiary, and repeating the beneficiary and time per node
// made a 64-node gang's marks 5 KB.
type Marks []Mark

// markGroup is marks saved together: one beneficiary, one time.
type markGroup struct {
	For    string     `json:"for"`
	Group  string     `json:"group,omitempty"`
	Until  time.Time  `json:"until"`
	Beside bool       `json:"beside,omitempty"`
	On     []NodeGPUs `json:"on"`
}

func (ms Marks) MarshalJSON() ([]byte, error) {
	var groups []markGroup
	for _, m := range ms {
		i := slices.IndexFunc(groups, func(g markGroup) bool {
			return g.For == m.For && g.Group == m.Group && g.Until.Equal(m.Until) && g.Beside == m.Beside
		})
		if i < 0 {
			groups = append(groups, markGroup{For: m.For, Group: m.Group, Until: m.Until, Beside: m.Beside})
			i = len(groups) - 1
		}
		groups[i].On = append(groups[i].On, NodeGPUs{Node: m.Node, GPUs: m.GPUs})
	}
	return json.Marshal(groups)
}

// UnmarshalJSON reads grouped marks, or the one-per-node marks earlier
// versions wrote.
func (ms *Marks) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("marks: %w", err)
	}
	out := Marks{}
	for _, r := range raw {
		var g markGroup
		if err := json.Unmarshal(r, &g); err == nil && g.On != nil {
			for _, on := range g.On {
				out = append(out, Mark{Node: on.Node, GPUs: on.GPUs, For: g.For, Group: g.Group, Until: g.Until, Beside: g.Beside})
			}
			continue
		}
		var m Mark
		if err := json.Unmarshal(r, &m); err != nil {
			return fmt.Errorf("marks: %w", err)
		}
		out = append(out, m)
	}
	*ms = out
	return nil
}

// markTTL is how long GPUs given back stay a beneficiary's: the round
// after the victims stop resumes it and Nomad places it within seconds;
// past this, something the engine cannot see (a constraint) keeps it off
// them, and they are free to all again.
const markTTL = time.Minute

// parseJobRef reads "namespace/id" (Nomad namespaces hold no slash).
func parseJobRef(s string) (engine.JobRef, bool) {
	ns, id, ok := strings.Cut(s, "/")
	return engine.JobRef{Namespace: ns, ID: id}, ok && ns != "" && id != ""
}

// markBeside keeps, in the first victim's state, the free GPUs the plan's
// preemption for a.For counted on beside the victims' own: until the
// victims' grace is over and markTTL more.
func (r *round) markBeside(st *JobState, a engine.Action) {
	if a.For == nil || r.plan == nil || r.marked[*a.For] {
		return
	}
	if r.marked == nil {
		r.marked = map[engine.JobRef]bool{}
	}
	r.marked[*a.For] = true
	for _, m := range r.plan.Earmarks {
		if m.For == *a.For {
			st.Marks = append(st.Marks, Mark{Node: shortID(m.NodeID), GPUs: m.GPUs, For: m.For.String(), Group: m.ForGroup,
				Until: r.now.Add(a.Grace + signalDelay + markTTL), Beside: true})
		}
	}
}

// markFreed keeps the GPUs a finished preemption (or a pressure idle
// stop, which names the work it frees GPUs for) gives back for its
// beneficiary: where the drain found its victims (Drain.On), or, for a
// drain recorded before it said, where Nomad still lists them. A victim
// that exited by itself during its grace is no longer listed, and its
// GPUs are the beneficiary's all the same.
//
// They stay set aside for markTTL after the last drain for the same
// beneficiary ends: it is released only then (it waits for all its
// victims), and GPUs given back early must still be its own.
func (ac *actor) markFreed(r *round, st *JobState, d *Drain) {
	if !freesFor(d) {
		return
	}
	on := d.On
	if len(on) == 0 {
		on = r.gpusOf(d.Allocs)
	}
	until := r.now
	for _, o := range ac.states() {
		for _, x := range o.Draining {
			if x != d && !x.Finished && x.For == d.For && x.Deadline.After(until) {
				until = x.Deadline
			}
		}
	}
	for _, g := range on {
		st.Marks = append(st.Marks, Mark{Node: g.Node, GPUs: g.GPUs, For: d.For, Group: d.ForGroup,
			Until: until.Add(markTTL)})
	}
}

// extendMarks keeps the GPUs already set aside for a beneficiary and not
// lapsed at now (in other jobs' states: an idle stop or a victim of an
// earlier action that gave them back) until markTTL after a new drain for
// it ends at end: the beneficiary is released only when the last of its
// victims stops. The states changed are saved (st, the caller's, by the
// caller).
func (ac *actor) extendMarks(ctx context.Context, st *JobState, bene string, now, end time.Time) {
	until := end.Add(markTTL)
	for _, o := range ac.sortedStates() {
		changed := false
		for i := range o.Marks {
			if m := &o.Marks[i]; m.For == bene && now.Before(m.Until) && m.Until.Before(until) {
				m.Until, changed = until, true
			}
		}
		if changed && o != st {
			if err := ac.save(ctx, o); err != nil {
				// The marks lapse at their old time: the beneficiary may
				// find those GPUs taken, and waits for others.
				ac.log().Warn("keep GPUs set aside", "for", bene, "job", o.key(), "error", err)
			}
		}
	}
}

// marksOutlastGrace keeps the GPUs set aside for a drain's beneficiary
// (those beside its victims, markBeside) until markTTL after the drain's
// grace ends, where they would lapse before it: a drain signalled late, as
// by a controller that took over and signalled its victims anew with a
// whole grace (the signal's time is not saved by itself: store.go). A
// drain signalled on time changes nothing, and writes nothing.
func (ac *actor) marksOutlastGrace(ctx context.Context, st *JobState, d *Drain, now time.Time) {
	if !freesFor(d) {
		return
	}
	for _, o := range ac.states() {
		for _, m := range o.Marks {
			if m.For == d.For && now.Before(m.Until) && m.Until.Before(d.Deadline) {
				ac.extendMarks(ctx, st, d.For, now, d.Deadline)
				return
			}
		}
	}
}

// forgetMarks stops setting aside GPUs for a beneficiary that no longer
// waits for them: a person paused it (only a person brings it back). The
// marks for it in every state are dropped, and those states saved (st,
// the caller's, by the caller), so that the GPUs its victims gave back go
// to the work that does wait; syncPlaceholders then purges what held
// them.
func (ac *actor) forgetMarks(ctx context.Context, st *JobState, bene string) {
	for _, o := range ac.sortedStates() {
		n := len(o.Marks)
		o.Marks = slices.DeleteFunc(o.Marks, func(m Mark) bool { return m.For == bene })
		if len(o.Marks) == n || o == st {
			continue
		}
		if err := ac.save(ctx, o); err != nil {
			// The marks stay saved; the snapshot and the placeholders
			// leave out a paused beneficiary's all the same.
			ac.log().Warn("give up GPUs set aside for a paused job", "for", bene, "job", o.key(), "error", err)
		}
	}
}

// unmark stops setting aside the GPUs a plan gave to urgent work for
// which nothing else was free or could be preempted (Plan.Unmarked): the
// marks for the beneficiary on that node shrink by as many GPUs, and
// syncPlaceholders purges the placeholder that held them, so that Nomad
// places the urgent work there. It returns the decisions to record.
func (ac *actor) unmark(ctx context.Context, r *round, unmarked []engine.Unmark) []Decision {
	var out []Decision
	for _, u := range unmarked {
		if r.unmarked == nil {
			r.unmarked = map[string]bool{}
		}
		r.unmarked[placeholderID(u.For, u.ForGroup, u.NodeID)] = true
		left := u.GPUs
		for _, st := range ac.sortedStates() {
			changed := false
			for i := range st.Marks {
				m := &st.Marks[i]
				if left == 0 || m.For != u.For.String() || !sameID(m.Node, u.NodeID) || !r.now.Before(m.Until) {
					continue
				}
				g := min(left, m.GPUs)
				m.GPUs -= g
				left -= g
				changed = true
			}
			if !changed {
				continue
			}
			st.Marks = slices.DeleteFunc(st.Marks, func(m Mark) bool { return m.GPUs <= 0 })
			if err := ac.save(ctx, st); err != nil {
				// The marks stay: the urgent work waits for the next
				// round, which plans the same again.
				r.failed++
				ac.log().Error("give GPUs set aside to urgent work", "for", u.For.String(), "to", u.To.String(), "job", st.key(), "error", err)
			}
		}
		ac.log().Info("set-aside GPUs taken", "for", u.For.String(), "to", u.To.String(), "node", u.NodeID, "gpus", u.GPUs,
			"reason", u.Reason.String())
		out = append(out, Decision{At: r.now, Kind: "take-set-aside", Job: u.To.String(), GPUs: u.GPUs,
			Rule: string(u.Reason.Rule), Reason: u.Reason.Message})
	}
	return out
}

// freesFor reports whether a drain frees its GPUs for a named waiting job:
// a preemption, or an idle stop under pressure.
func freesFor(d *Drain) bool {
	return d != nil && d.For != "" && (d.Kind == DrainPreempt || d.Kind == DrainIdleStop)
}

// gpusOf sums, per node (short IDs, as states keep them), the GPUs the
// listed allocations (short or full IDs) hold as Nomad shows them now, in
// the order first seen.
func (r *round) gpusOf(ids []string) []NodeGPUs {
	var out []NodeGPUs
	for _, a := range r.obs.Allocs {
		if len(a.GPUIDs) == 0 || !slices.ContainsFunc(ids, func(s string) bool { return sameID(s, a.ID) }) {
			continue
		}
		node := shortID(a.NodeID)
		i := slices.IndexFunc(out, func(g NodeGPUs) bool { return g.Node == node })
		if i < 0 {
			out = append(out, NodeGPUs{Node: node})
			i = len(out) - 1
		}
		out[i].GPUs += len(a.GPUIDs)
	}
	return out
}

// nodeResolver returns the full ID of the observed node a state names
// (short, or full from an earlier version), "" when no ready node is it.
func nodeResolver(nodes []ObservedNode) func(string) string {
	byShort := make(map[string][]string, len(nodes))
	for _, n := range nodes {
		byShort[shortID(n.ID)] = append(byShort[shortID(n.ID)], n.ID)
	}
	return func(stored string) string {
		for _, id := range byShort[shortID(stored)] {
			if sameID(stored, id) {
				return id
			}
		}
		return ""
	}
}

// pruneMarks drops a state's expired marks (saved with its next write).
func (s *JobState) pruneMarks(now time.Time) {
	s.Marks = slices.DeleteFunc(s.Marks, func(m Mark) bool { return !now.Before(m.Until) })
}

// snapshotMarks is what the states set aside at now for jobs that still
// want GPUs (live), as the engine reads it, in a stable order; node turns
// a stored node ID into the observed node's (nodeResolver).
func snapshotMarks(states map[jobKey]*JobState, now time.Time, live func(engine.JobRef) bool, node func(string) string) []engine.Earmark {
	var out []engine.Earmark
	for _, st := range states {
		for _, m := range st.Marks {
			id := node(m.Node)
			if ref, ok := parseJobRef(m.For); ok && now.Before(m.Until) && live(ref) && id != "" {
				out = append(out, engine.Earmark{NodeID: id, GPUs: m.GPUs, For: ref, ForGroup: m.Group})
			}
		}
	}
	slices.SortFunc(out, func(a, b engine.Earmark) int {
		if c := strings.Compare(a.NodeID, b.NodeID); c != 0 {
			return c
		}
		return strings.Compare(a.For.String(), b.For.String())
	})
	return out
}

// drainFor is the beneficiary a draining allocation's GPUs are freed for.
func drainFor(d *Drain) (*engine.JobRef, string) {
	if !freesFor(d) {
		return nil, ""
	}
	ref, ok := parseJobRef(d.For)
	if !ok {
		return nil, ""
	}
	return &ref, d.ForGroup
}
