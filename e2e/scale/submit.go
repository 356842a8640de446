package scale

import "math"

// submitLimit is how many jobs the driver may register in one tick: what
// ended since the last tick plus a quarter of the shortfall (GPUs the
// outstanding work is short of its demand), so that submission follows
// the churn at every size and catches up in a few ticks. At 1,000 nodes
// about 24 allocations end a second, 100 or more a tick: the old fixed
// 50 a tick fell behind, the cluster never filled, and nothing waited for
// Steward to decide (docs/evaluation.md, "1,000 nodes again").
//
// It is at least 50 (what small clusters always had) and at most one
// job for every 20 of the cluster's GPUs (400 at 8,000 GPUs, a tick's
// churn at 1,000 nodes twice over when a tick takes 8 s): a burst of
// thousands of registrations would queue evaluations for minutes on the
// server, which a real cluster's arrivals do not.
func submitLimit(gpus, ended, shortfall int) int {
	const floor = 50
	ceiling := max(floor, gpus/20)
	return min(ceiling, max(floor, ended+(max(shortfall, 0)+3)/4))
}

// backlogRoom is how many more evaluations the driver may add this tick
// while the server's scheduler has backlog waiting (its eval broker's
// ready and pending; -1 when it did not say): the backlog is kept under
// one evaluation for every 20 of the cluster's GPUs, at least 50 (400 at
// 8,000 GPUs, submitLimit's ceiling). Submission follows the server's
// placements where they are slower than the churn: at 1,000 nodes on a
// loaded machine, 8 at a time and ungated, 4,677 evaluations stood ready
// after 5 minutes, placed at about 5 a second, and work waited for
// Nomad, not for Steward. (Kept under 1 a 40 GPUs, 200, the room and not
// the server bound the fill: 7,429 jobs in 8 minutes, backlog p50 8,
// 1,483 GPUs free at its end.)
func backlogRoom(gpus, backlog int) int {
	if backlog < 0 {
		return math.MaxInt
	}
	return max(0, max(50, gpus/20)-backlog)
}

// highLimit is how many busy high-tier jobs the driver may add in one
// tick: 20, or one for every 200 of the cluster's GPUs where that is more
// (40 at 8,000), so that what waits for a preemption builds up within a
// minute or two at every size.
func highLimit(gpus int) int { return max(20, gpus/200) }

// fullAt is how few free GPUs (of allocations Nomad has not seen end,
// pending and running, Steward's holds included) make the cluster full:
// 1 % of its GPUs, at least 2. The fill ends there, not at a share of
// GPUs running: a window that opens with GPUs free has nothing waiting,
// and Steward nothing to decide.
func fullAt(gpus int) int { return max(2, gpus/100) }

// minDecisions is how many decisions a window needs to be a measure: 50
// from 250 nodes up (issue 33's goal at 1,000 nodes asks for 50); below,
// none (`make test`'s 10 nodes and 30 s check that the harness works,
// not what it measures). want >= 0 is the -scale.min-decisions flag.
func minDecisions(nodes, want int) int {
	switch {
	case want >= 0:
		return want
	case nodes >= 250:
		return 50
	}
	return 0
}
