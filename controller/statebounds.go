package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// Job states are bounded before they are written (bounds.go): a tenant
// chooses its job IDs, and the reasons Steward writes quote them.

// errStateTooBig: a state over stateMaxBytes, refused before Nomad is
// asked. It is the job's alone: every other job's state is saved.
var errStateTooBig = errors.New("job state too large")

// reasonMax is how much of each reason a state keeps: reasons quote job
// IDs and meta values that tenants choose.
const reasonMax = 2048

// idHash names a job whose ID is too long to save (JobState.IDHash).
func idHash(k jobKey) string {
	sum := sha256.Sum256([]byte(k.Namespace + "\x00" + k.ID))
	return hex.EncodeToString(sum[:])
}

// bounded is the state as saved: an ID over stateIDMax as its hash, each
// reason cut to reasonMax.
func (s *JobState) bounded() *JobState {
	long := len(s.ID) > stateIDMax
	over := len(s.Reason) > reasonMax
	for _, d := range s.Draining {
		over = over || len(d.Reason) > reasonMax || len(d.For) > stateRefMax
	}
	for _, n := range s.Outbox {
		over = over || len(n.Reason) > reasonMax
	}
	for _, m := range s.Marks {
		over = over || len(m.For) > stateRefMax
	}
	if !long && !over {
		return s
	}
	cp := *s
	if long {
		cp.ID, cp.IDHash = "", idHash(s.key())
	}
	cp.Reason = clip(s.Reason, reasonMax)
	cp.Draining = make([]*Drain, len(s.Draining))
	for i, d := range s.Draining {
		dc := *d
		dc.Reason = clip(d.Reason, reasonMax)
		dc.For = compactRef(d.For)
		cp.Draining[i] = &dc
	}
	if len(s.Marks) > 0 {
		cp.Marks = make(Marks, len(s.Marks))
		for i, m := range s.Marks {
			m.For = compactRef(m.For)
			cp.Marks[i] = m
		}
	}
	cp.Outbox = make([]*Notice, len(s.Outbox))
	for i, n := range s.Outbox {
		nc := *n
		nc.Reason = clip(n.Reason, reasonMax)
		cp.Outbox[i] = &nc
	}
	return &cp
}

// stateRefMax is the longest reference to another job ("namespace/job",
// the work a preemption is for) a state carries as it is; a longer one is
// saved as "namespace/~~" and the job's hash (compactRef), and made whole
// again when Nomad shows that job (resolveRefs).
const stateRefMax = stateIDMax

func compactRef(ref string) string {
	if len(ref) <= stateRefMax {
		return ref
	}
	ns, id, _ := strings.Cut(ref, "/")
	return ns + "/~~" + idHash(jobKey{ns, id})
}

// resolveRefs makes whole the references to long-ID jobs that states read
// back carry (compactRef): until then they name no job, as for a job that
// is gone.
func (s *stateStore) resolveRefs(long map[string]string) {
	if len(long) == 0 {
		return
	}
	for _, st := range s.states() {
		for _, d := range st.Draining {
			if full, ok := long[d.For]; ok {
				d.For = full
			}
		}
		for i := range st.Marks {
			if full, ok := long[st.Marks[i].For]; ok {
				st.Marks[i].For = full
			}
		}
	}
}

// unresolvedState is a saved state whose job ID was too long to save,
// waiting for its job to show (resolveStates).
type unresolvedState struct {
	st    *JobState
	index uint64
}

// resolveStates gives each state saved under a hashed ID to the job Nomad
// shows with that ID.
func (s *stateStore) resolveStates(obs *Observation) {
	long := map[string]string{} // compact reference -> the job's
	defer func() { s.resolveRefs(long) }()
	for k := range obs.Jobs {
		if len(k.ID) <= stateIDMax {
			continue
		}
		long[compactRef(k.String())] = k.String()
		p := statePath(k)
		u, ok := s.unresolved[p]
		if !ok || u.st.IDHash != idHash(k) || u.st.Namespace != k.Namespace {
			continue
		}
		delete(s.unresolved, p)
		u.st.ID, u.st.IDHash = k.ID, ""
		s.states()[k], s.index[k] = u.st, u.index
		if b, err := u.st.stableJSON(s.now()); err == nil {
			s.saved[k] = b
		}
		for short, idle := range u.st.Idle {
			s.usage.restore(short, idle)
		}
	}
}

// stateTooBig notes a state refused for its size (once per job and
// cause): the job's record says why (stateErrorItem), and the round is
// not failed for it, as no retry could write it.
func (s *stateStore) stateTooBig(k jobKey, err error) bool {
	if !errors.Is(err, errStateTooBig) {
		return false
	}
	if s.stateErr == nil {
		s.stateErr = map[jobKey]string{}
	}
	if s.stateErr[k] != err.Error() {
		s.log().Error("job state not saved", "job", clip(k.String(), quoteMax), "error", err)
		s.stateErr[k] = err.Error()
	}
	return true
}

// boundRecord adds to a job's record why its state could not be saved,
// and cuts each of Steward's values to reasonMax: reasons quote other
// jobs' IDs, which their tenants choose, and a record over Nomad's 64 KiB
// would never be written.
func (s *stateStore) boundRecord(k jobKey, items map[string]string) {
	if e := s.stateErr[k]; e != "" {
		items["steward_state_error"] = e
	}
	for key, v := range items {
		items[key] = clip(v, reasonMax)
	}
}
