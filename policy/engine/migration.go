package engine

// Migration instead of a hold. A victim that fits at once in GPUs that are
// still free once every waiting demand has been served need not wait in
// line after losing its GPUs: it is checkpointed and stopped as any
// victim, and resumed on that capacity as soon as its beneficiary is
// placed. The GPUs are set aside for it in this plan only after all
// waiting work had its turn, so a move never takes GPUs from work that
// ranks above it. Only a single allocation of a job that is not a gang
// moves: a gang's members are rarely all placeable at once.

// planMoves finds, for each Preempt of one allocation, a node in the pool
// of the node it runs on where its GPUs are free after the plan, sets them
// aside, and names the node in the action (Action.MoveTo).
func (st *state) planMoves() {
	var byID map[string]int32
	for i := range st.out.Actions {
		a := &st.out.Actions[i]
		if a.Kind != Preempt || len(a.Allocs) != 1 {
			continue
		}
		if byID == nil {
			byID = make(map[string]int32, len(st.s.Allocs))
			for ai := range st.s.Allocs {
				byID[st.s.Allocs[ai].ID] = int32(ai)
			}
		}
		ai, ok := byID[a.Allocs[0]]
		if !ok {
			continue
		}
		al := &st.s.Allocs[ai]
		from, ok := st.nodeIDs[al.NodeID]
		if !ok || al.Job.Gang {
			continue
		}
		g := len(al.GPUIDs)
		to, ok := st.cap.bestFit(st.poolOf[from], g)
		if !ok || to == from {
			continue
		}
		st.cap.add(to, -int32(g))
		st.touched(to)
		a.MoveTo = st.nodes[to].ID
		a.Reason.Message += moveNote(a.MoveTo, g)
	}
}

// moveNote is what a migrating victim's reason adds.
func moveNote(node string, gpus int) string {
	free := itoa(gpus) + " GPUs are"
	if gpus == 1 {
		free = "1 GPU is"
	}
	return "; it moves to node " + node + ", where " + free + " free, and resumes there once that work is placed"
}
