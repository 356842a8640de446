package scale

// The mix's bounds that make work wait for a preemption of busy work at
// every size (issue 33, item 3). Steward gives waiting work idle
// notebooks first (victimorder.go: idle, then backfill, then busy work),
// and Nomad gives the GPUs the churn frees to its highest-priority
// blocked work first. At 1,000 nodes half the notebooks idled (about a
// fifth of the GPUs) and the busy high-tier arrivals, 40 a tick of 8 s,
// were a third of the churn (14 allocations ended a second): a 5-minute
// window had 778 actions, every one an idle stop, hold or resume, and no
// decision for waiting work (docs/evaluation.md, "A 5-minute window at
// 1,000 nodes").

// idleBudget is how many GPUs the outstanding notebooks that idle may
// hold at once: 1 % of the cluster's, at least 2 (80 at 1,000 nodes).
// The idle rule's victims are then a pool the window's first rounds use
// up, and what waits after it needs busy work stopped; a notebook drawn
// to idle past the budget stays busy.
func idleBudget(gpus int) int { return max(2, gpus/100) }

// highShare is how many GPUs the busy high-tier jobs added beyond the
// demand may hold at once, outstanding: half the cluster's. Sized to the
// churn they would, over a long run, take every GPU the churn frees and
// leave no lower-tier work to preempt; the other half keeps the victims.
func highShare(gpus int) int { return gpus / 2 }

// highArrivals is how many busy high-tier one-GPU jobs the driver adds
// in a tick. Enough that, once the churn (ended: allocations the driver
// ended since the last tick, whose GPUs Nomad gives to the highest
// priority first) and the idle GPUs (idle) have served what waits, 1 %
// of the cluster (at least 2) still waits for a preemption; no more than
// the churn and highLimit's 20 (or one a 200 GPUs) a tick, what the
// server's backlog leaves room for (room), and highShare less the GPUs
// the added jobs hold already (held). waiting is their GPUs not placed
// yet. The old bound, waiting below idle + 1 % with at most highLimit a
// tick, ignored the churn: at 1,000 nodes everything added was placed on
// GPUs the churn freed, and none of it waited.
func highArrivals(gpus, ended, idle, waiting, held, room int) int {
	want := idle + max(2, gpus/100) + max(ended, 0) - waiting
	limit := min(max(ended, 0)+highLimit(gpus), room, highShare(gpus)-held)
	return max(0, min(want, limit))
}
