package sim

import (
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
)

// The controller tells the engine which GPUs were freed for whom: a
// draining allocation names its beneficiary (Alloc.For), and GPUs its
// victims gave back stay the beneficiary's (Snapshot.Earmarks) until it
// starts, stops waiting, or markTTL passes (Nomad may never place it
// there: a constraint the engine does not see).

// markTTL is how long GPUs freed for a beneficiary stay its own after its
// victims stopped, in plan intervals (at least one minute).
const markTTL = 2

// simMark is GPUs on a node set aside for a waiting job.
type simMark struct {
	node  int
	gpus  int
	bene  int32
	until time.Duration
	// held is how many of them a placeholder job holds while the
	// beneficiary is held, so that Nomad places nothing else there: the
	// free GPUs a preemption counted on beside its victims', as far as
	// they are free in Nomad's eyes (not still draining), as the
	// controller registers it; GPUs still draining when the plan counted
	// them are held once they free (holdFreed).
	held int
}

// drainFor is the beneficiary a draining job frees its GPUs for.
func (s *simulator) drainFor(j *simJob) *engine.JobRef {
	if s.cfg.NoEarmarks || j.state != draining || j.drainFor < 0 {
		return nil
	}
	return &s.jobs[j.drainFor].ref
}

// markFreed keeps the GPUs of a victim that stops now for its beneficiary.
func (s *simulator) markFreed(j *simJob) {
	if j.drainFor < 0 || s.cfg.NoEarmarks {
		j.drainFor = -1
		return
	}
	// The beneficiary is released when the last of its victims stops:
	// GPUs given back before then stay its own until markTTL after that.
	last := s.now
	for _, ai := range s.active {
		if o := &s.jobs[ai]; ai != j.idx && o.state == draining && o.drainFor == j.drainFor {
			last = max(last, o.drainEnd)
		}
	}
	until := last + max(time.Minute, markTTL*s.cfg.PlanInterval)
	for _, a := range j.allocs {
		// held: while the beneficiary stays held (other victims still
		// drain for it), a placeholder holds these GPUs, as the
		// controller registers one for any GPUs set aside for a held job.
		s.marks = append(s.marks, simMark{node: a.node, gpus: len(a.gpus), bene: j.drainFor, until: until, held: len(a.gpus)})
	}
	j.drainFor = -1
}

// extendMarks keeps the GPUs already set aside for bene until markTTL
// after a drain for it that ends at end: it is released only when the
// last of its victims stops.
func (s *simulator) extendMarks(bene int32, end time.Duration) {
	if bene < 0 {
		return
	}
	until := end + max(time.Minute, markTTL*s.cfg.PlanInterval)
	for i := range s.marks {
		if m := &s.marks[i]; m.bene == bene && m.until < until && s.now < m.until {
			m.until = until
		}
	}
}

// keepMarks keeps the free GPUs a plan's preemptions count on beside their
// victims' for the beneficiaries, as the controller does: for the signal
// delay, the longest grace and markTTL after it. Their placeholders hold
// what is free of them (holdFreed).
func (s *simulator) keepMarks(marks []engine.Earmark) {
	if s.cfg.NoEarmarks {
		return
	}
	until := s.now + nomadmodel.SignalDelay + s.maxGrace + max(time.Minute, markTTL*s.cfg.PlanInterval)
	for _, m := range marks {
		bi, known := s.byRef[m.For]
		n, onNode := s.cl.nodeIdx[m.NodeID]
		if known && onNode {
			s.marks = append(s.marks, simMark{node: n, gpus: m.GPUs, bene: bi, until: until})
		}
	}
	s.holdFreed()
}

// holdFreed sizes the placeholders of the marks standing for held
// beneficiaries, per beneficiary and node, as the controller's
// wantedPlaceholders does each round (nomadmodel.Holds): each keeps what
// it holds and takes what is free of its marks now, less the GPUs set
// aside for work Nomad places in this round (queued: its own,
// nomadmodel.PlacingMarks). GPUs promised while still draining are held
// once they free.
func (s *simulator) holdFreed() {
	type key struct {
		bene int32
		node int
	}
	var keys []key
	var hs []nomadmodel.Placeholder
	for _, m := range s.marks {
		if s.now >= m.until || s.jobs[m.bene].state != held {
			continue
		}
		k := key{m.bene, m.node}
		i := slices.Index(keys, k)
		if i < 0 {
			keys = append(keys, k)
			hs = append(hs, nomadmodel.Placeholder{Node: s.cl.nodeIDs[m.node]})
			i = len(keys) - 1
		}
		hs[i].Want += m.gpus
		hs[i].Held += m.held
	}
	if len(hs) == 0 {
		return
	}
	placing := s.placingMarks()
	free := map[string]int{}
	for _, k := range keys {
		id := s.cl.nodeIDs[k.node]
		free[id] = s.cl.free[k.node] - s.placeholdersOn(k.node) - placing[id]
	}
	for i, g := range nomadmodel.Holds(hs, free) {
		more := g - hs[i].Held
		for j := range s.marks {
			m := &s.marks[j]
			if more <= 0 {
				break
			}
			if m.bene != keys[i].bene || m.node != keys[i].node || s.now >= m.until {
				continue
			}
			add := min(more, m.gpus-m.held)
			m.held += add
			more -= add
		}
	}
}

// placingMarks is, by node ID, the GPUs set aside for beneficiaries in
// Nomad's queue, which it places in this round (resumed by the plan, or
// queued): no placeholder holds them (holding), and one registered now
// for other work must leave them free.
func (s *simulator) placingMarks() map[string]int {
	var live []engine.Earmark
	for _, m := range s.marks {
		if s.now < m.until && s.jobs[m.bene].state == queued {
			live = append(live, engine.Earmark{NodeID: s.cl.nodeIDs[m.node], GPUs: m.gpus, For: s.jobs[m.bene].ref})
		}
	}
	if len(live) == 0 {
		return nil
	}
	return nomadmodel.PlacingMarks(live, func(engine.Earmark) bool { return true }, func(m engine.Earmark) int {
		j := &s.jobs[s.byRef[m.For]]
		return j.spec.GPUs * j.spec.Allocs
	})
}

// dropMarks stops setting aside the GPUs a plan gave to urgent work
// (Plan.Unmarked), as the controller does: the marks shrink, and so do
// the placeholders holding them, so that Nomad places the urgent work
// there.
func (s *simulator) dropMarks(unmarked []engine.Unmark) {
	for _, u := range unmarked {
		bi, known := s.byRef[u.For]
		n, onNode := s.cl.nodeIdx[u.NodeID]
		if !known || !onNode {
			continue
		}
		left := u.GPUs
		for i := range s.marks {
			m := &s.marks[i]
			if left == 0 {
				break
			}
			if m.bene != bi || m.node != n || s.now >= m.until {
				continue
			}
			g := min(left, m.gpus)
			m.gpus -= g
			m.held = min(m.held, m.gpus)
			left -= g
		}
	}
	s.marks = slices.DeleteFunc(s.marks, func(m simMark) bool { return m.gpus <= 0 })
}

// earmarks appends the marks still standing to out, dropping the rest.
func (s *simulator) earmarks(out []engine.Earmark) []engine.Earmark {
	live := s.marks[:0]
	for _, m := range s.marks {
		b := &s.jobs[m.bene]
		if s.now >= m.until || !b.state.waiting() {
			continue
		}
		live = append(live, m)
		out = append(out, engine.Earmark{NodeID: s.cl.nodeIDs[m.node], GPUs: m.gpus, For: b.ref, ForGroup: "main"})
	}
	s.marks = live
	return out
}

// placeholderRoom is the free GPUs Nomad may place on, per node, in room:
// the cluster's, less those placeholders hold for beneficiaries still
// held (the controller purges a placeholder in the round that resumes its
// beneficiary). It returns nil when no placeholder holds any.
func (s *simulator) placeholderRoom(room []int) []int {
	some := false
	for _, m := range s.marks {
		if s.holding(m) {
			if !some {
				copy(room, s.cl.free)
				some = true
			}
			room[m.node] = max(0, room[m.node]-m.held)
		}
	}
	if !some {
		return nil
	}
	return room
}

// holding reports whether a mark's placeholder holds GPUs now.
func (s *simulator) holding(m simMark) bool {
	return m.held > 0 && s.now < m.until && s.jobs[m.bene].state == held
}

// placeholdersOn is the GPUs placeholders hold on node n.
func (s *simulator) placeholdersOn(n int) int {
	g := 0
	for _, m := range s.marks {
		if m.node == n && s.holding(m) {
			g += m.held
		}
	}
	return g
}
