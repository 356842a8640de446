package engine

// Migration instead of a hold. A victim that fits at once in GPUs that are
// still free once every waiting demand has been served need not wait in
// line after losing its GPUs: it is checkpointed and stopped as any
// victim, and resumed on that capacity as soon as its beneficiary is
// placed. The GPUs are set aside for it in this plan only after all
// waiting work had its turn, so a move never takes GPUs from work that
// ranks above it. Only a single allocation of a job that is not a gang
// moves: a gang's members are rarely all placeable at once.

// noteMovable remembers a victim that makes a Preempt of its own and may
// move: a single allocation of a job that is not a gang.
func (st *state) noteMovable(group []victim) {
	if len(group) != 1 || group[0].rule == RuleIdle {
		return
	}
	if u := &st.units[group[0].ui]; u.gang < 0 {
		st.movable = append(st.movable, group[0].ui)
	}
}

// planMoves finds, for each movable victim, a node in the pool of the node
// it runs on where its GPUs are free after the plan, sets them aside, and
// names the node in its Preempt (Action.MoveTo).
func (st *state) planMoves() {
	if len(st.movable) == 0 {
		return
	}
	preempts := make(map[string]int, len(st.movable))
	for i := range st.out.Actions {
		if a := &st.out.Actions[i]; a.Kind == Preempt && len(a.Allocs) == 1 {
			preempts[a.Allocs[0]] = i
		}
	}
	for _, ui := range st.movable {
		u := &st.units[ui]
		i, ok := preempts[st.s.Allocs[u.first].ID]
		if !ok {
			continue
		}
		to, ok := st.cap.bestFit(st.poolOf[u.node], u.gpus)
		if !ok || to == u.node {
			continue
		}
		st.cap.add(to, -int32(u.gpus))
		st.touched(to)
		a := &st.out.Actions[i]
		a.MoveTo = st.nodes[to].ID
		a.Reason.Message += moveNote(a.MoveTo, u.gpus)
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
