package engine

// GPUs freed for a beneficiary are its own until it runs. A preemption
// pays off only if the work it was made for then runs; if the freed GPUs
// counted as free to everyone, the next plan could hand them to other work
// ranked above the beneficiary (the victim itself, held and resumed), and
// the victim would have lost its run for nothing. So GPUs being drained
// for a beneficiary (Alloc.For), and GPUs its victims already gave back
// while Nomad has not placed it yet (Snapshot.Earmarks), are set aside:
// free to no one but the beneficiary, which is placed on them first when
// its turn comes. Once it is served, what it did not take is free to the
// work after it. A beneficiary that no longer waits has no earmarks: its
// GPUs are free to all. Work of a higher tier that finds no free GPU may
// take earmarked GPUs of lower tiers (only what it needs) before it
// preempts anyone: an
// earmark protects a preemption from work ranked with or below its tier
// (the victim resumed first, a borrower), never urgent work from waiting.

// demandRef identifies a waiting demand: a job's group.
type demandRef struct {
	job   JobRef
	group string
}

// earmark sets g GPUs on node n aside for the waiting demand named by
// job and group, and reports whether it did: false when job is nil or the
// demand is not waiting.
func (st *state) earmark(job *JobRef, group string, victim *JobRef, n int32, g int) bool {
	if job == nil || g <= 0 {
		return false
	}
	w, ok := st.waitingIndex(demandRef{*job, group})
	if !ok {
		return false
	}
	if st.marks == nil {
		st.marks = map[int32][]nodeGPUs{}
		st.markVictims = map[markKey]map[JobRef]bool{}
	}
	if _, seen := st.marks[w]; !seen {
		st.markOrder = append(st.markOrder, w)
	}
	st.marks[w] = addNode(st.marks[w], n, g)
	if victim != nil {
		k := markKey{w, n}
		if st.markVictims[k] == nil {
			st.markVictims[k] = map[JobRef]bool{}
		}
		st.markVictims[k][*victim] = true
	}
	return true
}

// markKey is a beneficiary's earmark on one node.
type markKey struct {
	w    int32
	node int32
}

// markedBelow finds a node where b fits in free GPUs plus GPUs set aside
// for work of a lower tier than b's, moves what b needs out of those
// earmarks into the free GPUs, and returns the node. The rest stay set
// aside: only the urgent work gets them.
func (st *state) markedBelow(b *bene) (int32, bool) {
	prio := st.e.tiers[b.tier].priority
	for _, w := range st.markOrder {
		marks := st.marks[w]
		d := &st.s.Waiting[w]
		if len(marks) == 0 || st.e.tiers[st.e.tierFor(st.tenantOf(d.Job.Ref.Namespace), d.Job.Tier)].priority >= prio {
			continue
		}
		for i := range marks {
			m := &marks[i]
			n := m.node
			if st.markVictims[markKey{w, n}][b.d.Job.Ref] {
				continue // its own GPUs, freed from it for this work
			}
			need := b.g - int(st.cap.free[n])
			if m.gpus == 0 || need > m.gpus || !st.cap.nodeIn(n, b.pool) {
				continue
			}
			if need > 0 {
				m.gpus -= need
				st.cap.add(n, int32(need))
				st.touched(n)
			}
			return n, true
		}
	}
	return 0, false
}

// earmarkFreed sets aside the GPUs of Snapshot.Earmarks, out of each
// node's free GPUs (no more than are free: input is not trusted).
func (st *state) earmarkFreed(free []int32) {
	for i := range st.s.Earmarks {
		m := &st.s.Earmarks[i]
		n, ok := st.nodeIDs[m.NodeID]
		if !ok {
			st.skip("earmark for "+m.For.String(), "on unknown node %q", m.NodeID)
			continue
		}
		g := min(m.GPUs, int(free[n]))
		var victim *JobRef
		if m.Victim.ID != "" {
			victim = &m.Victim
		}
		if g > 0 && st.earmark(&m.For, m.ForGroup, victim, n, g) {
			free[n] -= int32(g)
		}
	}
}

// waitingIndex finds a waiting demand by job and group; the index is built
// on first use, since most plans have no earmarks.
func (st *state) waitingIndex(r demandRef) (int32, bool) {
	if st.waitingIdx == nil {
		st.waitingIdx = make(map[demandRef]int32, len(st.s.Waiting))
		for i := range st.s.Waiting {
			d := &st.s.Waiting[i]
			k := demandRef{d.Job.Ref, d.Group}
			if _, dup := st.waitingIdx[k]; !dup {
				st.waitingIdx[k] = int32(i)
			}
			// "" names the job's first waiting group: a gang is served
			// whole, and a controller may know only the job.
			if _, dup := st.waitingIdx[demandRef{d.Job.Ref, ""}]; !dup {
				st.waitingIdx[demandRef{d.Job.Ref, ""}] = int32(i)
			}
		}
	}
	w, ok := st.waitingIdx[r]
	return w, ok
}

// takeMarks returns the GPUs set aside for waiting demand w and makes them
// free: its turn has come. Placements try them first (markedFit); what it
// leaves is free to the work after it.
func (st *state) takeMarks(w int32) []nodeGPUs {
	marks := st.marks[w]
	if marks == nil {
		return nil
	}
	delete(st.marks, w)
	for _, m := range marks {
		st.cap.add(m.node, int32(m.gpus))
		st.touched(m.node)
	}
	return marks
}

// markedFit returns a node set aside for b that fits one of its
// allocations.
func (st *state) markedFit(b *bene) (int32, bool) {
	for _, m := range b.marks {
		if st.cap.nodeIn(m.node, b.pool) && int(st.cap.free[m.node]) >= b.g {
			return m.node, true
		}
	}
	return 0, false
}
