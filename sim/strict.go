package sim

import (
	"cmp"
	"slices"
)

// settleStrict is Nomad's scheduler with preemption on: queued work is
// placed by priority, and a job that does not fit preempts running work at
// least StrictPriorityDelta priority points lower. Victims are stopped at
// once (no checkpoint signal, no grace: they fall back to their last
// periodic checkpoint) and go back to the queue; no reservations, minimum
// runtime or eviction caps apply. Preempting one allocation of a gang
// stops the whole gang, which cannot run short of a member.
func (s *simulator) settleStrict() {
	// A pass may requeue victims that can themselves preempt lower work:
	// repeat until a pass preempts nothing. Victims are always lower than
	// their preemptor, so this ends.
	for {
		var requeued []int32
		kept := s.queue[:0]
		for _, ji := range s.queue {
			spec := s.jobs[ji].spec
			if nodes, ok := s.cl.plan(spec.GPUs, spec.Allocs, s.jobs[ji].model, s.scratch); ok {
				s.start(ji, nodes)
				continue
			}
			victims, nodes, ok := s.strictVictims(ji)
			if !ok {
				kept = append(kept, ji)
				continue
			}
			for _, v := range victims {
				s.stopRun(v, keepPeriodic)
				s.preempted(&s.jobs[v])
				s.jobs[v].waitSince = s.now
				s.setState(v, queued)
				requeued = append(requeued, v)
			}
			s.start(ji, nodes)
		}
		s.queue = kept
		for _, v := range requeued {
			s.enqueue(v)
		}
		if len(requeued) == 0 {
			return
		}
	}
}

// strictVictims finds, for each allocation of job ji, a node where free
// GPUs plus those of lower-priority work make room, the way Nomad's
// preemption ranks them: the node whose worst victim has the lowest
// priority, then the fewest GPUs preempted; on a node, victims lowest
// priority first (most recently started first among equals), trimmed to
// those needed.
func (s *simulator) strictVictims(ji int32) (victims []int32, nodes []int, ok bool) {
	j := &s.jobs[ji]
	ceiling := j.priority - StrictPriorityDelta // highest victim priority
	lowest := -1
	for p := range s.prioRun {
		if s.prioRun[p] > 0 {
			lowest = p
			break
		}
	}
	if lowest < 0 || lowest > ceiling {
		return nil, nil, false
	}
	s.markGen++
	gen := s.markGen
	free := s.scratch
	copy(free, s.cl.free)
	g := j.spec.GPUs
	type cand struct {
		job  int32
		gpus int // on this node
	}
	var cands, pick, best []cand
	for range j.spec.Allocs {
		if n := s.cl.bestFitOf(free, g, j.model); n >= 0 {
			free[n] -= g
			nodes = append(nodes, n)
			continue
		}
		bestNode, bestPrio, bestGPUs := -1, 0, 0
		for n, owners := range s.cl.owner {
			if !s.cl.usable(n, j.model) {
				continue // GPUs it cannot use: nothing to free there
			}
			cands = cands[:0]
			room := free[n]
			for _, o := range owners {
				if o < 0 || o == ji || s.mark[o] == gen || s.jobs[o].priority > ceiling {
					continue
				}
				if i := slices.IndexFunc(cands, func(c cand) bool { return c.job == o }); i >= 0 {
					cands[i].gpus++
				} else {
					cands = append(cands, cand{job: o, gpus: 1})
				}
				room++
			}
			if room < g {
				continue
			}
			slices.SortFunc(cands, func(a, b cand) int {
				ja, jb := &s.jobs[a.job], &s.jobs[b.job]
				if c := cmp.Compare(ja.priority, jb.priority); c != 0 {
					return c
				}
				if c := cmp.Compare(jb.startedAt, ja.startedAt); c != 0 {
					return c
				}
				return cmp.Compare(a.job, b.job)
			})
			pick = pick[:0]
			got := free[n]
			for _, c := range cands {
				if got >= g {
					break
				}
				pick = append(pick, c)
				got += c.gpus
			}
			// Trim: drop the highest-priority picks the node can do without.
			for i := len(pick) - 1; i >= 0; i-- {
				if got-pick[i].gpus >= g {
					got -= pick[i].gpus
					pick = slices.Delete(pick, i, i+1)
				}
			}
			worst, total := 0, 0
			for _, c := range pick {
				worst = max(worst, s.jobs[c.job].priority)
				total += s.jobs[c.job].gpus()
			}
			if bestNode < 0 || worst < bestPrio || (worst == bestPrio && total < bestGPUs) {
				bestNode, bestPrio, bestGPUs = n, worst, total
				best = append(best[:0], pick...)
			}
		}
		if bestNode < 0 {
			return nil, nil, false
		}
		for _, c := range best {
			s.mark[c.job] = gen
			victims = append(victims, c.job)
			for _, a := range s.jobs[c.job].allocs {
				free[a.node] += len(a.gpus)
			}
		}
		free[bestNode] -= g
		nodes = append(nodes, bestNode)
	}
	return victims, nodes, true
}
