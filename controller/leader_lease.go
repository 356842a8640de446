package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Election kinds (Config.Election).
const (
	ElectionLock  = "lock"
	ElectionLease = "lease"
)

// A Nomad variable lock cannot fail over in under 20 s: Nomad refuses a
// TTL under 10 s and keeps a lock twice its TTL after the last renewal
// (nomad/structs/variables.go, nomad/locks.go). The lease election keeps
// the lease in the same variable (LeaderLockPath) itself, check-and-set,
// so that its TTL is the operator's:
//
//   - The leader writes the variable (holder, term, TTL) every TTL/3. Its
//     lease lasts one TTL from when its last successful write was sent
//     (lease.extend, as for the lock), and every write it makes is fenced
//     by it (fencedNomad).
//   - A follower reads the variable every lockPoll and notes, on its own
//     clock, when it first saw its current modify index. Only once that
//     index has stood for leaseExpiry (2×TTL) does it write the variable,
//     check-and-set against that index, and lead. The index it saw was
//     written after the leader sent it, so the leader's lease had ended a
//     whole TTL earlier: the same margin as the lock's 2×TTL against a
//     TTL lease, for clocks that run at different rates and writes in
//     flight. No clocks are compared between machines.
//   - Two writers race on the index: Nomad takes one check-and-set, and
//     the other's renewal or takeover is refused (ErrLockConflict).
//   - A leader whose lease ran out with no renewal answered (a server
//     stalled past the lease's deadline) takes back the term the
//     variable still holds at once, check-and-set against the index it
//     reads, as a renewal would (leaseSeen.held): a follower's takeover
//     against the same index refuses it, and the fence was closed in
//     between.
//   - A copy that stops hands the lease back (holder emptied) and a
//     follower takes it at once; a variable under a Nomad lock (a copy
//     elected with -election lock) refuses the write, so a lease copy never
//     leads beside it.
//
// Why 2×TTL, and not less. The follower's wait must cover the leader's
// lease (one TTL from a send the follower saw no earlier than it was
// made; clock rates differ by parts per million, nothing at this scale)
// and then every write the leader sent inside its lease and Nomad had
// not yet applied: only once those have landed is the new leader alone.
// The fence checks the lease when a write is sent, and each write's
// context ends by -nomad-timeout; a deadline at the lease's end could be
// added. Neither bounds when Nomad applies it: the agent's HTTP handler
// hands a request it has read to an RPC that takes no context, and Raft
// waits up to 30 s to enqueue an apply (command/agent/*_endpoint.go,
// nomad/rpc.go enqueueLimit), so a write whose client has given up may
// still land later. No bound tighter than "a TTL after the lease's end"
// can be proven from the client, and 2×TTL is the margin Nomad's own
// lock keeps against the same in-flight writes, not a proof either; a
// shorter wait would trade that margin (writes take seconds on a loaded
// server) for time. So the wait stays 2×TTL, and a failover within 10 s
// comes from a TTL short enough to keep: a renewal is given what its
// lease has left (renewUntil), not a third of the TTL.
//
// A follower polls every lockPoll (TTL/10, at most 1 s): it sees the
// leader's last write up to one poll late. It used to act up to one poll
// after the expiry too (half a poll on average, 0.15 s at a 3 s TTL); it
// now asks again when the expiry falls due (leaseWait), the condition
// itself unchanged. A blocking query on the variable (Nomad's index and
// wait) would also see the last write at once; left for its small gain.
//
// The cost is a Raft write per renewal (Nomad's lock renewals are not
// written): 60 a minute at a 3 s TTL, for a failover of about 2×TTL.

// leaseExpiry is how long a follower waits, on its own clock, for a lease
// whose variable no longer changes before it takes the lease.
func leaseExpiry(ttl time.Duration) time.Duration { return 2 * ttl }

// electLease runs lead while this controller holds the lease.
func (e *elector) electLease(ctx context.Context, lead func(context.Context) error) error {
	e.log().Info("waiting to lead", "lease", LeaderLockPath, "namespace", e.cfg().StateNamespace, "identity", e.cfg().Identity, "ttl", e.cfg().LockTTL)
	seen := &leaseSeen{now: time.Now}
	warm := func() {
		go func() {
			// Logged with its time: a new leader's first round plans
			// while this read still runs (observer.refresh), waiting
			// only for its summaries (observe_waited in "round phases").
			cost, err := e.refresh(ctx, e.now())
			if err != nil && ctx.Err() == nil {
				e.log().Warn("read the cluster before taking an unrenewed lease", "error", err)
			} else if err == nil && !cost.joined {
				e.log().Info("read the cluster before taking an unrenewed lease", "full_read", cost.read.Round(time.Millisecond),
					"summaries", cost.summaries, "summaries_took", cost.summariesTook.Round(time.Millisecond))
			}
		}()
		// The states too, alongside (store_prefetch.go): the term's load
		// then reads only those written since.
		go func() {
			if err := e.prefetchStates(ctx); err != nil && ctx.Err() == nil {
				e.log().Warn("read the job states before taking an unrenewed lease", "error", err)
			}
		}()
	}
	return e.contend(ctx, func() (leaderLock, error) {
		return &leaseLock{wiring: e.wiring, seen: seen, term: newTerm(), warm: warm}, nil
	}, lead)
}

func newTerm() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// leaseSeen is what a follower saw of the lease: its modify index, and
// when (on this machine's monotonic clock) it first saw it.
type leaseSeen struct {
	index uint64
	at    time.Time
	now   func() time.Time
	// warmed is the index the follower last read the cluster for
	// (leaseLock.Acquire).
	warmed uint64
	// expiry is the wait stood last asked about.
	expiry time.Duration
	// wrote holds the terms of this copy's takeover writes since it last
	// led, whose answers may have been lost while Nomad applied them.
	wrote map[string]bool
	// held is the term this copy last led with and did not hand back
	// (Release empties it): its lease ran out, its renewals unanswered.
	held string
}

// mine reports whether term is one this copy wrote: a takeover whose
// answer was lost, or the term it led with until its lease ran out.
func (s *leaseSeen) mine(term string) bool {
	return s.wrote[term] || (term != "" && term == s.held)
}

// stalled reports, once per index, whether the index it last saw has
// stood for at least d: the leader may be dead.
func (s *leaseSeen) stalled(d time.Duration) bool {
	if s.at.IsZero() || s.warmed == s.index || s.now().Sub(s.at) < d {
		return false
	}
	s.warmed = s.index
	return true
}

// stood reports whether index has stood for at least d since this copy
// first saw it, noting it when new.
func (s *leaseSeen) stood(index uint64, d time.Duration) bool {
	now := s.now()
	s.expiry = d
	if index != s.index || s.at.IsZero() {
		s.index, s.at = index, now
		return false
	}
	return now.Sub(s.at) >= d
}

// dueIn is how long until the index last seen has stood for the expiry
// last asked of stood.
func (s *leaseSeen) dueIn() time.Duration { return s.expiry - s.now().Sub(s.at) }

// leaseWait is the conflict of a lease held by another copy, with how
// long until it falls due if not renewed meanwhile: the follower asks
// again then (electionWait.after) rather than up to a poll later.
type leaseWait struct{ in time.Duration }

func (w leaseWait) Error() string {
	return fmt.Sprintf("%v (the lease falls due in %s unless renewed)", api.ErrLockConflict, w.in)
}

func (w leaseWait) Unwrap() error { return api.ErrLockConflict }

// leaseLock is one term's claim on the lease (a leaderLock): Acquire
// takes a free or expired lease, Renew rewrites it, Release empties it.
type leaseLock struct {
	wiring
	seen  *leaseSeen
	term  string
	index uint64 // the variable's index after this term's last write
	// warm reads the cluster in full in the background (observer.refresh),
	// once a held lease has stood for half its expiry; nil: not at all.
	warm func()
}

func (l *leaseLock) items(holder string) map[string]string {
	if holder == "" {
		return map[string]string{"holder": "", "election": ElectionLease}
	}
	return map[string]string{"holder": holder, "term": l.term, "election": ElectionLease, "ttl": l.cfg().LockTTL.String()}
}

// call runs one lease request in its callContext, as lock requests
// (lockCall): a renewal until its lease's end, others a third of the TTL.
func (l *leaseLock) call(ctx context.Context, f func(context.Context) error) error {
	cctx, cancel := callContext(ctx, l.cfg().LockTTL)
	defer cancel()
	return f(cctx)
}

func (l *leaseLock) Acquire(ctx context.Context) error {
	return l.call(ctx, func(ctx context.Context) error {
		items, index, err := l.unfenced().GetVar(ctx, l.cfg().StateNamespace, LeaderLockPath)
		if err != nil {
			return fmt.Errorf("read the leader lease: %w", err)
		}
		if items != nil && items["holder"] != "" && !l.seen.mine(items["term"]) {
			// Held (by a lease, or by a copy elected with the Nomad lock,
			// whose write refuses ours): taken once it has stood unchanged
			// for its expiry, the holder's TTL as written if longer.
			if leaseHeld(map[string]string{"election": ElectionLease, "holder": items["holder"], "ttl": items["ttl"]}, index, l.seen, l.cfg().LockTTL) {
				if l.warm != nil && l.seen.stalled(leaseExpiry(l.cfg().LockTTL)/2) {
					// Halfway through the wait: this copy is likely to
					// lead soon. The resync its first round would make
					// is made now, in time the wait spends anyway.
					l.warm()
				}
				return leaseWait{in: l.seen.dueIn()}
			}
			l.log().Warn("the leader lease was not renewed: taking it", "holder", items["holder"])
		}
		if items != nil && items["term"] != "" && items["term"] == l.seen.held {
			// The term this copy led with until its lease ran out (a
			// renewal unanswered until the lease's deadline: the server
			// stalled for seconds at 250 nodes, issue 33), and nobody
			// wrote since: taken again now, check-and-set against the
			// index read, as a renewal would. Before, this copy waited
			// out its own lease for 2×TTL as another holder's, while the
			// follower, counting since the last renewal it saw, took it
			// first: the lead changed hands on every stall. The lease
			// still counts from this write, and the fence stayed closed
			// from the old lease's deadline to now, so nothing was done
			// without a lease; a follower that takes it first (its own
			// check-and-set against the same index) refuses this write.
			l.log().Warn("the leader lease still holds the term this copy led with until its lease ran out: taking it again", "term", items["term"])
		} else if items != nil && l.seen.wrote[items["term"]] {
			// This copy's own takeover, whose answer was lost (a write
			// Nomad applied after its call timed out): taken again now,
			// check-and-set, as a free lease. Before, it was waited out
			// as another holder's, 2×TTL more (14.2 s to the lease at
			// 250 nodes, issue 33). When that write was sent is not
			// known, so the lease counts from this write, not from it.
			l.log().Warn("the leader lease holds this copy's own takeover, whose answer was lost: taking it again", "term", items["term"])
		}
		// The raw client: the fence refuses every write until this
		// controller holds a lease.
		if l.seen.wrote == nil {
			l.seen.wrote = map[string]bool{}
		}
		l.seen.wrote[l.term] = true
		next, err := l.unfenced().PutVar(ctx, l.cfg().StateNamespace, LeaderLockPath, l.items(l.cfg().Identity), true, index)
		if err != nil {
			if isConflict(err) {
				delete(l.seen.wrote, l.term) // refused: it never lands
				// Taken first by another copy, or under a Nomad lock
				// (Nomad answers a write to a locked variable as a
				// check-and-set conflict).
				return api.ErrLockConflict
			}
			return fmt.Errorf("take the leader lease: %w", err)
		}
		l.index = next
		clear(l.seen.wrote)
		l.seen.held = l.term
		return nil
	})
}

func (l *leaseLock) Renew(ctx context.Context) error {
	return l.call(ctx, func(ctx context.Context) error {
		next, err := l.unfenced().PutVar(ctx, l.cfg().StateNamespace, LeaderLockPath, l.items(l.cfg().Identity), true, l.index)
		if err == nil {
			l.index = next
			return nil
		}
		if !isConflict(err) {
			return fmt.Errorf("renew the leader lease: %w", err)
		}
		// A renewal that Nomad applied but whose answer was lost moved
		// the index: this term's own write is no other holder's.
		items, index, rerr := l.unfenced().GetVar(ctx, l.cfg().StateNamespace, LeaderLockPath)
		if rerr != nil {
			// Whose write moved it is unknown (a starved server times
			// out the read as it did the write): retried until the
			// lease's deadline, which the fence holds to, rather than
			// taken for another holder's.
			return fmt.Errorf("renew the leader lease: read it back after a conflict: %w", rerr)
		}
		if items["term"] != l.term {
			return api.ErrLockConflict
		}
		l.index = index
		return errors.New("renew the leader lease: its index moved under this term's own write; renewing again")
	})
}

func (l *leaseLock) Release(ctx context.Context) error {
	// Handed back, or stepping down: this term is not to be taken again
	// at once even if the write below does not land.
	l.seen.held = ""
	return l.call(ctx, func(ctx context.Context) error {
		_, err := l.unfenced().PutVar(ctx, l.cfg().StateNamespace, LeaderLockPath, l.items(""), true, l.index)
		if isConflict(err) {
			return api.ErrLockConflict
		}
		return err
	})
}

// leaseHeld reports whether a copy elected with -election lease holds the
// leader variable's lease (renewed within its expiry, as seen doing so):
// a copy elected with the Nomad lock must not take the lock beside it,
// since Nomad would grant it on a variable without a lock.
func leaseHeld(items map[string]string, index uint64, seen *leaseSeen, ttl time.Duration) bool {
	if items == nil || items["election"] != ElectionLease || items["holder"] == "" {
		return false
	}
	expiry := leaseExpiry(ttl)
	if t, err := time.ParseDuration(items["ttl"]); err == nil && leaseExpiry(t) > expiry {
		expiry = leaseExpiry(t)
	}
	return !seen.stood(index, expiry)
}
