package engine

import (
	"fmt"
	"time"
)

// Why one job's work is given up before another's (`steward plan -explain
// JOB -versus OTHER`, issue 32 item 3): the victim order of victimorder.go
// applied to the two jobs' running work as a plan of the snapshot begins,
// naming the first criterion that tells them apart, with each side's fact.

// VictimComparison is the answer.
type VictimComparison struct {
	// First is the job whose work the order gives up first, Second the
	// other ("namespace/ID").
	First, Second string
	// Criterion is the number of the first criterion that tells them
	// apart (1 = class ...), Name and Why what it is; the facts are each
	// side's value of it.
	Criterion             int
	Name, Why             string
	FirstFact, SecondFact string
}

func (c VictimComparison) String() string {
	return fmt.Sprintf("%s is given up before %s by criterion %d, %s (%s): %s has %s; %s has %s",
		c.First, c.Second, c.Criterion, c.Name, c.Why, c.First, c.FirstFact, c.Second, c.SecondFact)
}

// CompareVictims compares the running work of jobs x and y by the victim
// order, as a plan of s at now begins: each job's first unit in the order
// stands for it. The plan itself may see the order otherwise later in its
// course (a tenant's use changes as it takes and places work) and skips
// candidates the order does not rank (capped, protected, the beneficiary's
// own). A job with no running work, or none a preemption may take (a
// non-preemptible tier), is an error saying so.
func (e *Engine) CompareVictims(s *Snapshot, now time.Time, x, y JobRef) (VictimComparison, error) {
	st := newState(e, s, now)
	best := func(j JobRef) (victimFacts, error) {
		var out victimFacts
		found, running := false, false
		for ui := range st.units {
			u := &st.units[ui]
			if st.s.Allocs[u.first].Job.Ref != j {
				continue
			}
			running = true
			if !e.tiers[u.tier].preemptible {
				continue
			}
			f := st.victimFacts(int32(ui))
			if !found || victimKey(&f) < victimKey(&out) {
				out, found = f, true
			}
		}
		switch {
		case !running:
			return out, fmt.Errorf("%s runs no work with GPUs in this snapshot: nothing of it can be a victim", j)
		case !found:
			return out, fmt.Errorf("%s runs only in non-preemptible tiers: no preemption takes it", j)
		}
		return out, nil
	}
	fx, err := best(x)
	if err != nil {
		return VictimComparison{}, err
	}
	fy, err := best(y)
	if err != nil {
		return VictimComparison{}, err
	}
	c, crit := compareVictims(&fx, &fy)
	if crit == nil {
		return VictimComparison{}, fmt.Errorf("%s and %s are the same work", x, y)
	}
	first, second, ff, fs := x, y, &fx, &fy
	if c > 0 {
		first, second, ff, fs = y, x, &fy, &fx
	}
	return VictimComparison{First: first.String(), Second: second.String(), Criterion: crit.num, Name: crit.name, Why: crit.why,
		FirstFact: crit.show(ff), SecondFact: crit.show(fs)}, nil
}
