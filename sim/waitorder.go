package sim

import (
	"cmp"
	"slices"
)

// The engine serves demands the policy ranks equal longest waiting first,
// then by name, and sorts the whole queue for it on every plan unless the
// snapshot says the order (engine.Snapshot.WaitingOrder). Under Steward
// the simulator keeps its waiting jobs in that order as they come and go,
// a few at a time, so that each plan only checks it. (The snapshot's
// Waiting itself keeps Nomad's queue order: the engine's actions follow
// it.)

// waitCompare orders waiting jobs as the engine does: since when they wait,
// then by namespace/ID (a job has one demand, so names never tie).
func (s *simulator) waitCompare(a, b int32) int {
	ja, jb := &s.jobs[a], &s.jobs[b]
	if c := cmp.Compare(ja.waitSince, jb.waitSince); c != 0 {
		return c
	}
	return cmp.Compare(ja.name, jb.name)
}

// startWaiting adds a job that has just begun to wait (its waitSince set)
// to the wait order.
func (s *simulator) startWaiting(ji int32) {
	i, _ := slices.BinarySearchFunc(s.waitOrder, ji, s.waitCompare)
	s.waitOrder = slices.Insert(s.waitOrder, i, ji)
}

// stopWaiting takes a job that no longer waits out of the wait order. Its
// waitSince has not changed while it waited.
func (s *simulator) stopWaiting(ji int32) {
	i, found := slices.BinarySearchFunc(s.waitOrder, ji, s.waitCompare)
	if !found {
		i = slices.Index(s.waitOrder, ji) // not expected: keep the list whole all the same
	}
	if i >= 0 {
		s.waitOrder = slices.Delete(s.waitOrder, i, i+1)
	}
}

// waitingOrder is the wait order as indices into the snapshot's Waiting,
// whose entries were appended for the jobs in listed, in that order.
func (s *simulator) waitingOrder(listed [][]int32) []int32 {
	at := 0
	for _, list := range listed {
		for _, ji := range list {
			s.snapPos[ji] = int32(at)
			at++
		}
	}
	order := s.snap.WaitingOrder[:0]
	for _, ji := range s.waitOrder {
		order = append(order, s.snapPos[ji])
	}
	return order
}
