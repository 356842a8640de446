package controller

import (
	"time"
)

// A leader that cannot finish a round steps down. Every Nomad call has a
// deadline (deadline.go), but a round made of calls that each fail by
// their deadline, or a step that waits on something else, still leaves
// the cluster without enforcement while the leader lock is renewed on its
// own schedule: no other copy can take over. The election loops (leader.go,
// leader_consul.go) therefore watch when the last round finished and, past
// Config.RoundTimeout, end the lease (fencing every write at once), release
// the lock, and only then wait for the control loop to stop.

// roundFinished notes that a round finished now, or that one starts after
// a finished one, or that a term began: the round timeout counts from
// here.
func (e *elector) roundFinished() { e.lastRoundAt.Store(time.Now().UnixNano()) }

// lastRound is when the last round finished (or the term began).
func (e *elector) lastRound() time.Time { return time.Unix(0, e.lastRoundAt.Load()) }

// stuck reports whether no round finished within the round timeout.
func (e *elector) stuck() bool {
	return e.cfg().RoundTimeout > 0 && time.Since(e.lastRound()) > e.cfg().RoundTimeout
}

// roundCheck is how often the election loop checks for a stuck round.
func roundCheck(bound time.Duration) time.Duration {
	if bound <= 0 {
		return time.Hour
	}
	return min(max(bound/10, 10*time.Millisecond), time.Second)
}
