package controller

import (
	"context"
	"slices"
	"sync"
)

// A follower about to lead reads the job states while it waits out the
// dead leader's lease (leaseLock.Acquire's warm), so that its term's
// load (loadStates) reads again only the states written since. At 250
// nodes the load of 480-630 states took 0.7-1.5 s of a failover
// (issue 33, 2026-11-29), after the lease's 2×TTL wait.
//
// What it read is used only where it is provably current: the load lists
// the states under the lease, as before, and takes a prefetched state
// only where the list shows the same modify index as the read (Nomad
// moves a variable's index with every write, and a variable deleted and
// written again gets a new one). Every other state, and every state
// when nothing was prefetched, is read as before. The list is the one
// read a term's load always made, so a write the old leader made after
// the prefetch, or one Nomad applied late, is read afresh.

// statePrefetch holds the job states a follower read ahead, by variable
// (VarRef with Index 0). The follower's warm goroutine fills it while
// the control loop's load may already take it: both hold mu.
type statePrefetch struct {
	mu   sync.Mutex
	read map[VarRef]readState
}

// prefetchStates reads every job state now, as loadStates would, and
// keeps what it read for the next load. A follower calls it; it writes
// nothing.
func (s *stateStore) prefetchStates(ctx context.Context) error {
	refs, err := s.nomad().ListVars(ctx, s.cfg().StateNamespace, statePrefix)
	if err != nil {
		return err
	}
	refs = slices.DeleteFunc(refs, func(ref VarRef) bool { return ref.Namespace != s.cfg().StateNamespace })
	read, err := s.readStates(ctx, refs)
	if err != nil {
		return err
	}
	byRef := make(map[VarRef]readState, len(refs))
	for i, ref := range refs {
		if read[i].items != nil && read[i].index != 0 {
			byRef[VarRef{Namespace: ref.Namespace, Path: ref.Path}] = read[i]
		}
	}
	s.prefetch.mu.Lock()
	s.prefetch.read = byRef
	s.prefetch.mu.Unlock()
	return nil
}

// takePrefetched returns the states read ahead and forgets them: a load
// uses them once.
func (s *stateStore) takePrefetched() map[VarRef]readState {
	s.prefetch.mu.Lock()
	defer s.prefetch.mu.Unlock()
	read := s.prefetch.read
	s.prefetch.read = nil
	return read
}

// readListed reads the states refs name (listed just now, with their
// indexes), taking from ahead those read at the index listed; it says
// how many it took.
func (s *stateStore) readListed(ctx context.Context, refs []VarRef, ahead map[VarRef]readState) (out []readState, reused int, err error) {
	out = make([]readState, len(refs))
	var stale []VarRef
	var at []int
	for i, ref := range refs {
		pre, ok := ahead[VarRef{Namespace: ref.Namespace, Path: ref.Path}]
		if ok && ref.Index != 0 && pre.index == ref.Index {
			out[i] = pre
			reused++
			continue
		}
		stale = append(stale, ref)
		at = append(at, i)
	}
	read, err := s.readStates(ctx, stale)
	if err != nil {
		return nil, 0, err
	}
	for j, i := range at {
		out[i] = read[j]
	}
	return out, reused, nil
}
