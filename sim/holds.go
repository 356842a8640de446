package sim

import (
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// holdTimes is where each high-priority job's wait for its first start
// went, rule by rule: the delay metric counts that wait whole, and a wait
// held by the job's own tenant's limit is the policy doing what the
// operator asked, which strict priority (no limits) never does. Each plan
// says why every demand it leaves waiting waits (engine.Plan.Waiting, its
// rule), so the time between two plans is charged to the rule the first
// gave. A Hold action is emitted only when work first goes from Nomad's
// queue to held, so the rule of the last Hold (simJob.holdRule) can be
// stale by the time the job starts; this follows every plan.
type holdTimes struct {
	// prefix[i] is how many high-priority jobs are among the first i of
	// the trace (they arrive in order): with the starts counted, how many
	// wait for their first start, so that a plan with none skips its
	// waiting list, and a scan stops once it has seen them all.
	prefix []int32
	clocks map[int32]*holdClock
	seen   uint32 // plan number, for holdClock.seen

	// net is each started high-priority job's delay less the time its own
	// tenant's limit held it, in minutes.
	net []float64
	// longByRule is, over high-priority jobs that waited longer than
	// LongWait, the time held under each rule ("queued": in Nomad's
	// queue with no hold of Steward's).
	longByRule map[string]time.Duration
	// allByRule is the same over every high-priority job's first wait.
	allByRule map[string]time.Duration
}

// holdClock is one waiting job's account.
type holdClock struct {
	rule     engine.Rule // holding it now; "" while in Nomad's queue alone
	since    time.Duration
	byRule   map[engine.Rule]time.Duration
	ownLimit time.Duration
	seen     uint32
}

// ruleQueued names time in Nomad's queue with no hold of Steward's.
const ruleQueued = "queued"

// init counts the high-priority jobs of s's trace, once.
func (h *holdTimes) init(s *simulator) {
	if h.prefix != nil {
		return
	}
	h.prefix = make([]int32, len(s.jobs)+1)
	for i := range s.jobs {
		h.prefix[i+1] = h.prefix[i]
		if s.jobs[i].high {
			h.prefix[i+1]++
		}
	}
	h.clocks = map[int32]*holdClock{}
}

// clock is job ji's account, opened at its submission.
func (h *holdTimes) clock(ji int32, submit time.Duration) *holdClock {
	c := h.clocks[ji]
	if c == nil {
		c = &holdClock{since: submit}
		h.clocks[ji] = c
	}
	return c
}

// to charges the time since the last change to the rule that held it, and
// moves the job to rule from now.
func (c *holdClock) to(rule engine.Rule, now time.Duration) {
	if rule == c.rule {
		return
	}
	c.charge(now)
	c.rule, c.since = rule, now
}

func (c *holdClock) charge(now time.Duration) {
	d := now - c.since
	if d <= 0 {
		return
	}
	if c.byRule == nil {
		c.byRule = map[engine.Rule]time.Duration{}
	}
	c.byRule[c.rule] += d
	if c.rule == engine.RuleLimit {
		// A limit hold is always the waiting job's own: its tenant's, its
		// tenant's in a pool, or its department's (engine reasons).
		c.ownLimit += d
	}
	c.since = now
}

// plan follows one of the engine's plans: actions first (a Resume puts
// work in Nomad's queue; one after victims waits for them to drain),
// then the rule of everything the plan leaves waiting.
func (h *holdTimes) plan(s *simulator, plan *engine.Plan) {
	h.init(s)
	waiting := int(h.prefix[s.nextArrival]) - len(s.m.high)
	if waiting <= 0 {
		return
	}
	h.seen++
	mark := func(ref engine.JobRef, rule engine.Rule) bool {
		ji, ok := s.byRef[ref]
		if !ok {
			return false
		}
		j := &s.jobs[ji]
		if !j.high || j.firstStart >= 0 {
			return false
		}
		c := h.clock(ji, j.spec.Submit)
		c.to(rule, s.now)
		if c.seen == h.seen {
			return false
		}
		c.seen = h.seen
		return true
	}
	for _, a := range plan.Actions {
		switch a.Kind {
		case engine.Resume:
			rule := engine.Rule("")
			if a.AfterVictims {
				rule = engine.RuleDraining
			}
			mark(a.Job, rule)
		case engine.Hold:
			mark(a.Job, a.Reason.Rule)
		}
	}
	h.seen++ // the waiting list's word is the last
	found := 0
	for i := range plan.Waiting {
		if mark(plan.Waiting[i].Job, plan.Waiting[i].Reason.Rule) {
			if found++; found == waiting {
				break
			}
		}
	}
}

// started closes job ji's account at its first start (delay in minutes).
func (h *holdTimes) started(ji int32, delay float64, now time.Duration) {
	if h.longByRule == nil {
		h.longByRule, h.allByRule = map[string]time.Duration{}, map[string]time.Duration{}
	}
	long := delay > LongWait.Minutes()
	c := h.clocks[ji]
	if c == nil {
		// Never held: its whole wait was Nomad's queue.
		h.net = append(h.net, delay)
		if d := time.Duration(delay * float64(time.Minute)); d > 0 {
			h.allByRule[ruleQueued] += d
			if long {
				h.longByRule[ruleQueued] += d
			}
		}
		return
	}
	delete(h.clocks, ji)
	c.charge(now)
	h.net = append(h.net, max(0, delay-c.ownLimit.Minutes()))
	for rule, d := range c.byRule {
		name := string(rule)
		if name == "" {
			name = ruleQueued
		}
		h.allByRule[name] += d
		if long {
			h.longByRule[name] += d
		}
	}
}

// inHours is a map of durations in hours, nil when empty.
func inHours(m map[string]time.Duration) map[string]float64 {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]float64, len(m))
	for rule, d := range m {
		out[rule] = d.Hours()
	}
	return out
}
