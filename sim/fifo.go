package sim

// placeQueued is Nomad placing its queue with preemption off: highest
// priority first, then the longest waiting, each job wherever it fits now
// (a job that does not fit does not block smaller ones behind it).
func (s *simulator) placeQueued() {
	if len(s.queue) == 0 {
		return
	}
	kept := s.queue[:0]
	for i, ji := range s.queue {
		if s.cl.totalFree == 0 {
			kept = append(kept, s.queue[i:]...)
			break
		}
		spec := s.jobs[ji].spec
		if nodes, ok := s.cl.plan(spec.GPUs, spec.Allocs, s.scratch); ok {
			s.start(ji, nodes)
			continue
		}
		kept = append(kept, ji)
	}
	s.queue = kept
}
