package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestQueueMoves: a tenant reorders its own waiting work (Demand.QueueAt,
// steward queue move) only among the places its own demands of the same
// class hold: another tenant's demands keep theirs, and a move never
// lifts a demand above higher tiered or higher priority work.
func TestQueueMoves(t *testing.T) {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	demand := func(ns, id string, since int, prio int) Demand {
		return Demand{Job: Job{Ref: JobRef{ns, id}, Tier: "training", Priority: prio}, Group: "main",
			GPUsPerAlloc: 8, Count: 1, Since: at(since)}
	}
	interactive := func(d Demand) Demand { d.Job.Tier = "interactive"; return d }
	base := func() []Demand {
		return []Demand{demand("a", "a1", 0, 40), demand("b", "b1", 1, 40), demand("a", "a2", 2, 40),
			demand("b", "b2", 3, 40), demand("a", "a3", 4, 40)}
	}
	cases := []struct {
		name  string
		moves map[string]time.Time // job ID: QueueAt
		extra []Demand
		want  []string
	}{
		{name: "nobody moved: class then time, tenants interleaved",
			want: []string{"a/a1", "b/b1", "a/a2", "b/b2", "a/a3"}},
		{name: "top: a3 takes a1's place and b keeps both of its places",
			moves: map[string]time.Time{"a3": at(0).Add(-time.Nanosecond)},
			want:  []string{"a/a3", "b/b1", "a/a1", "b/b2", "a/a2"}},
		{name: "before: a3 moved just before a2 takes a2's place",
			moves: map[string]time.Time{"a3": at(2).Add(-time.Nanosecond)},
			want:  []string{"a/a1", "b/b1", "a/a3", "b/b2", "a/a2"}},
		{name: "a move far into the past still never passes another tenant's work",
			moves: map[string]time.Time{"a2": at(-1000)},
			want:  []string{"a/a2", "b/b1", "a/a1", "b/b2", "a/a3"}},
		{name: "a move stays within its class: the tenant's work of a higher tier stays first",
			moves: map[string]time.Time{"a3": at(-1000)},
			extra: []Demand{interactive(demand("a", "urgent", 9, 40))},
			want:  []string{"a/urgent", "a/a3", "b/b1", "a/a1", "b/b2", "a/a2"}},
		{name: "two moves of one tenant rank by the times they moved to",
			moves: map[string]time.Time{"a3": at(-2), "a2": at(-1)},
			want:  []string{"a/a3", "b/b1", "a/a2", "b/b2", "a/a1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(testPolicy(func(p *policy.Policy) {
				p.Tenants["a"] = tenant("a", 0, policy.Unlimited)
				p.Tenants["b"] = tenant("b", 0, policy.Unlimited)
			}))
			s := &Snapshot{Waiting: append(base(), tc.extra...)}
			for i := range s.Waiting {
				s.Waiting[i].QueueAt = tc.moves[s.Waiting[i].Job.Ref.ID]
			}
			var got []string
			for _, p := range newState(e, s, at(30)).orderDemands() {
				got = append(got, p.d.Job.Ref.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("order %v, want %v", got, tc.want)
			}
		})
	}
}
