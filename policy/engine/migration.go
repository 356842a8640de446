package engine

// Migration instead of a hold. A victim that fits at once in GPUs that are
// still free once every waiting demand has been served need not wait in
// line after losing its GPUs: it is checkpointed and stopped as any
// victim, and resumed on that capacity as soon as its beneficiary is
// placed. The GPUs are set aside for it in this plan only after all
// waiting work had its turn, so a move never takes GPUs from work that
// ranks above it. Only a single allocation of a job that is not a gang
// moves: a gang's members are rarely all placeable at once.

// move is a Preempt of one allocation of a job that is not a gang: its
// victim unit, and the action's index in the plan.
type move struct {
	ui     int32
	action int
}

// planMoves finds, for each Preempt whose victim may move, a node in the
// pool of the node it runs on where its GPUs are free after the plan, sets
// them aside, and names the node in the action (Action.MoveTo). A victim
// that would take its tenant over its limit stays held.
func (st *state) planMoves() {
	for _, m := range st.moves {
		u := &st.units[m.ui]
		if t := &st.tenants[u.tenant]; t.use+t.marked+int(u.units) > t.limit() || st.e.depts != nil && st.overDeptLimit(u.tenant, int(u.units)) {
			// Running again at once would take its tenant over its
			// limit: it was taken to make room under it (swapElsewhere),
			// or the plan gave the room to the tenant's other work.
			continue
		}
		to, ok := st.cap.bestFit(st.pl.homeSet(u.node), u.gpus)
		if !ok || to == u.node {
			continue
		}
		st.ix.change(to, noUnit, -int32(u.gpus))
		st.tenants[u.tenant].use += u.gpus * st.pl.unitsOn(to)
		a := &st.out.Actions[m.action]
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
