package engine

import "time"

// capGrace caps a victim's checkpoint grace at age: how long it, or the
// oldest of the victims taken with it for the same work, has run. Work
// that started less than a grace ago has less than a grace of progress to
// save, and the work it yields to should not wait longer for it than it
// ran. Above all, work Nomad placed into GPUs freed for someone else (it
// arrived between two plans and fitted) is stopped at once, and the
// beneficiary is not held back by a second grace. Victims taken together
// share the cap: one freed early would only let Nomad fill its GPUs with
// other work while the rest drain. The reason says so.
func (st *state) capGrace(a *Action, age time.Duration) {
	if a.Grace <= 0 || age >= a.Grace {
		return
	}
	age = max(0, age.Truncate(time.Second))
	var m msg
	m.start(a.Reason.Message)
	if age < time.Second {
		a.Grace, a.Signal = 0, ""
		m.s("; the victims started under a second ago: stopped at once, with nothing to checkpoint")
	} else {
		a.Grace = age
		m.s("; the victims started at most ").dur(age).s(" ago: grace ").dur(age).s(", no longer than they ran")
	}
	a.Reason.Message = m.reason(a.Reason.Rule).Message
}
