package controller

import (
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
			st.Marks = append(st.Marks, Mark{Node: m.NodeID, GPUs: m.GPUs, For: m.For.String(), Group: m.ForGroup,
				Until: r.now.Add(a.Grace + signalDelay + markTTL), Beside: true})
		}
	}
}

// markFreed keeps the GPUs a finished preemption gives back for its
// beneficiary.
func (r *round) markFreed(st *JobState, d *Drain) {
	if d.For == "" || d.Kind != string(engine.Preempt) {
		return
	}
	for _, a := range r.obs.Allocs {
		if len(a.GPUIDs) > 0 && slices.Contains(d.Allocs, a.ID) {
			st.Marks = append(st.Marks, Mark{Node: a.NodeID, GPUs: len(a.GPUIDs), For: d.For, Group: d.ForGroup,
				Until: r.now.Add(markTTL)})
		}
	}
}

// pruneMarks drops a state's expired marks (saved with its next write).
func (s *JobState) pruneMarks(now time.Time) {
	s.Marks = slices.DeleteFunc(s.Marks, func(m Mark) bool { return !now.Before(m.Until) })
}

// snapshotMarks is what the states set aside at now, as the engine reads
// it, in a stable order.
func snapshotMarks(states map[jobKey]*JobState, now time.Time) []engine.Earmark {
	var out []engine.Earmark
	for _, st := range states {
		for _, m := range st.Marks {
			if ref, ok := parseJobRef(m.For); ok && now.Before(m.Until) {
				out = append(out, engine.Earmark{NodeID: m.Node, GPUs: m.GPUs, For: ref, ForGroup: m.Group})
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
	if d == nil || d.Kind != string(engine.Preempt) {
		return nil, ""
	}
	ref, ok := parseJobRef(d.For)
	if !ok {
		return nil, ""
	}
	return &ref, d.ForGroup
}
