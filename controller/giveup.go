package controller

import (
	"fmt"
	"slices"
	"time"
)

// victimPendingLimit is how long a finished preemption waits for Nomad to
// carry out its victims' stops when Nomad has every one of them in hand
// (a stop requested and not yet evaluated, or a group scaled to no
// allocation): then it is given up, so that the engine plans on what runs.
// Nomad evaluates those stops at the victim's priority, behind its eval
// broker's backlog: on a loaded 2-core server at 250 nodes they stayed
// pending for minutes (issue 33), and giving them up at victimStopLimit,
// as a failed call, made every round of a new leader fail for 20-46 s.
// Asking Nomad again would only queue another evaluation behind the rest.
const victimPendingLimit = 10 * time.Minute

// Why a preemption was given up (steward_preemptions_given_up_total).
const (
	givenUpStopsPending = "stops-pending"
	givenUpVictimsRun   = "victims-run"
)

// awaitPendingStops waits for Nomad to carry out the stops of a finished
// preemption's victims, all of which Nomad has in hand (stragglers: none),
// and gives the preemption up once they have been pending for
// victimPendingLimit since it finished. That is a decision, with its
// reason, not a failed call: Nomad answered every call, and nothing a
// retry could send would make it faster.
func (dr *drainer) awaitPendingStops(r *round, st *JobState, d *Drain, since time.Duration) {
	if since < victimPendingLimit {
		r.wake(d.FinishedAt.Add(victimPendingLimit))
		return
	}
	alive := len(r.aliveOf(st.key(), d.Allocs))
	why := givingUpReason(st.key(), d, since, alive)
	dr.log().Warn("victims' stops still pending in Nomad: giving the preemption up so the next plan sees them",
		"job", st.key(), "for", d.For, "allocs", d.Allocs, "since", since, "reason", why)
	st.Draining = slices.DeleteFunc(st.Draining, func(x *Drain) bool { return x == d })
	dr.metrics.givenUp.WithLabelValues(givenUpStopsPending).Inc()
	gpus := 0
	for _, on := range d.On {
		gpus += on.GPUs
	}
	dr.remember(Decision{At: r.now, Kind: decisionGiveUp, Job: st.key().String(), Group: d.Group, GPUs: gpus,
		Rule: givenUpStopsPending, Reason: why})
}

// decisionGiveUp is the status's kind of a preemption given up.
const decisionGiveUp = "give-up"

// givingUpReason says why a preemption is given up, with its numbers.
func givingUpReason(k jobKey, d *Drain, since time.Duration, alive int) string {
	why := fmt.Sprintf("victims' stops pending in Nomad for %s: giving up preemption of %s", since.Round(time.Second), k)
	if d.For != "" {
		why += " for " + d.For
	}
	return why + fmt.Sprintf(" (%s of %d still running; the next plan sees them)", plural(alive, "victim"), len(d.Allocs))
}
