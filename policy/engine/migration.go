package engine

// Migration instead of a hold. A victim that fits at once in free GPUs
// elsewhere, that no demand served before it in this plan took, need not
// wait in line after losing its GPUs: it is checkpointed and stopped as
// any victim, and resumed on that capacity as soon as its beneficiary is
// placed (Resume of a preempted job ranks first by default, and the GPUs
// are set aside for it here, so later demands in the plan do not take
// them). Only a whole single allocation moves: a gang moves whole or not at
// all, and its members are rarely all placeable at once.

// planMoves finds, for each single-allocation victim, a node in the pool
// of the node it runs on where its GPUs are free now, and sets them aside.
func (st *state) planMoves(vs []victim) {
	for i := range vs {
		v := &vs[i]
		u := &st.units[v.ui]
		if u.gang >= 0 || v.rule == RuleIdle {
			continue
		}
		n, ok := st.cap.bestFit(st.poolOf[u.node], u.gpus)
		if !ok || n == u.node {
			continue
		}
		st.cap.add(n, -int32(u.gpus))
		st.touched(n)
		v.moveTo = n + 1
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
