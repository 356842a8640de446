package controller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestElectionWait: how long a copy that does not lead waits before asking
// for the lock again. An answer (another copy leads) ends a run of failed
// calls, and a TTL bounds the backoff: before, every failure of the
// follower's life grew it, and at 250 nodes on a loaded server the
// follower took the dead leader's 3 s lease 32 s after the death, between
// two polls 30 s apart (issue 33).
func TestElectionWait(t *testing.T) {
	timeout := errors.New("read the leader lease: context deadline exceeded")
	s := time.Second
	cases := []struct {
		name  string
		ttl   time.Duration
		calls []error
		want  []time.Duration
	}{
		{name: "timeouts in a row on a 3 s lease: the backoff stops at the TTL", ttl: 3 * s,
			calls: []error{timeout, timeout, timeout, timeout, timeout, timeout},
			want:  []time.Duration{s, 2 * s, 3 * s, 3 * s, 3 * s, 3 * s}},
		{name: "an answer between timeouts ends their run", ttl: 3 * s,
			calls: []error{timeout, timeout, timeout, api.ErrLockConflict, timeout, timeout},
			want:  []time.Duration{s, 2 * s, 3 * s, 300 * time.Millisecond, s, 2 * s}},
		{name: "a follower's occasional timeouts over a long wait never grow it", ttl: 3 * s,
			calls: []error{timeout, api.ErrLockConflict, timeout, api.ErrLockConflict, timeout, api.ErrLockConflict, timeout, api.ErrLockConflict, timeout},
			want:  []time.Duration{s, 300 * time.Millisecond, s, 300 * time.Millisecond, s, 300 * time.Millisecond, s, 300 * time.Millisecond, s}},
		{name: "a lease that falls due before the next poll is asked for then", ttl: 3 * s,
			calls: []error{leaseWait{in: 2 * s}, leaseWait{in: 120 * time.Millisecond}, timeout, leaseWait{in: 300 * time.Millisecond}},
			want:  []time.Duration{300 * time.Millisecond, 120 * time.Millisecond, s, 300 * time.Millisecond}},
		{name: "on the Nomad lock (a 15 s TTL)", ttl: 15 * s,
			calls: []error{timeout, timeout, timeout, timeout, timeout, timeout},
			want:  []time.Duration{s, 2 * s, 4 * s, 8 * s, 15 * s, 15 * s}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := electionWait{ttl: tc.ttl, max: 30 * s}
			var got []time.Duration
			for _, err := range tc.calls {
				got = append(got, w.after(err))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("waits %v, want %v", got, tc.want)
			}
		})
	}
}
