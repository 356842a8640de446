package sim

import (
	"time"

	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
)

// A preemption pays off only if the work it was made for runs: a victim
// checkpointed and held for a beneficiary that then keeps waiting lost its
// run for nothing. These checks count such preemptions (wasted_preemptions)
// the way a user would see them: the beneficiary is not running one plan
// interval after the victim's grace ended.

// beneCheck is one preemption made for a named beneficiary.
type beneCheck struct {
	victim, bene int32
	at           time.Duration // when the preemption was decided
}

// watchBeneficiary schedules the check of a preemption made for a.For.
func (s *simulator) watchBeneficiary(victim int32, a engine.Action) {
	if a.For == nil {
		return
	}
	bi, ok := s.byRef[*a.For]
	if !ok {
		return
	}
	s.checks = append(s.checks, beneCheck{victim: victim, bene: bi, at: s.now})
	s.schedule(event{at: s.now + nomadmodel.DrainTime(&a) + s.cfg.PlanInterval, kind: evCheck, check: int32(len(s.checks) - 1)})
}

// checkBeneficiaries checks the preemptions due now, after the instant
// settled (the beneficiary may be placed at this very instant).
func (s *simulator) checkBeneficiaries() {
	for _, ci := range s.due {
		c := s.checks[ci]
		b := &s.jobs[c.bene]
		if b.lastStart >= c.at || b.state == running || b.state == draining || b.state == done {
			continue
		}
		v := &s.jobs[c.victim]
		s.m.wasted(v.lastStart >= c.at && (v.state == running || v.state == draining))
	}
	s.due = s.due[:0]
}
