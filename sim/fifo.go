package sim

// placeQueued is Nomad placing its queue with preemption off: highest
// priority first, then the longest waiting, each job wherever it fits now
// (a job that does not fit does not block smaller ones behind it).
func (s *simulator) placeQueued() {
	if len(s.queue) == 0 {
		return
	}
	var room []int // nil: every free GPU is Nomad's to place on
	if s.kind == Steward && len(s.marks) > 0 {
		room = s.placeholderRoom(s.room)
	}
	kept := s.queue[:0]
	for i, ji := range s.queue {
		if s.cl.totalFree == 0 {
			kept = append(kept, s.queue[i:]...)
			break
		}
		spec, m := s.jobs[ji].spec, s.jobs[ji].model
		nodes, ok := s.cl.plan(spec.GPUs, spec.Allocs, m, s.scratch)
		if ok && room != nil {
			nodes, ok = s.cl.planOn(room, spec.GPUs, spec.Allocs, m)
		}
		if ok {
			s.start(ji, nodes)
			for _, n := range nodes {
				if room != nil {
					room[n] -= spec.GPUs
				}
			}
			continue
		}
		kept = append(kept, ji)
	}
	s.queue = kept
}

// planOn places count allocations of g GPUs of model m by best fit on the
// free GPUs in room, all or nothing, without changing room.
func (c *cluster) planOn(room []int, g, count int, m int32) ([]int, bool) {
	nodes := make([]int, 0, count)
	for range count {
		n := c.bestFitOf(room, g, m)
		if n < 0 {
			for _, m := range nodes {
				room[m] += g
			}
			return nil, false
		}
		room[n] -= g
		nodes = append(nodes, n)
	}
	for _, m := range nodes {
		room[m] += g
	}
	return nodes, true
}
