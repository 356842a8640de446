package engine

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestOrderMatchesOneSort checks sortDemands (time order, then a stable
// radix sort by class) against the order it stands for, one sort by the
// whole key, on generated queues with many ties, with and without a hint
// (Snapshot.WaitingOrder): right, shuffled, and malformed.
func TestOrderMatchesOneSort(t *testing.T) {
	for seed := 0; seed < 40; seed++ {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		tenants := 1 + r.IntN(6)
		p := genPolicy(tenants, r.IntN(20), []int{-1, 40}[r.IntN(2)])
		if seed%2 == 1 {
			p.Preemption.ResumeOrder = policy.ResumeOrderLongestWaiting
		}
		s := genCluster(r, 20, 8, 40, 300, tenants, t0)
		for i := range s.Waiting {
			d := &s.Waiting[i]
			// Few distinct times and clashing names, so that every tie-break
			// is reached; namespaces that are prefixes of one another.
			d.Since = t0.Add(-time.Duration(r.IntN(4)) * time.Second).Add(time.Duration(r.IntN(2)) * time.Millisecond)
			if r.IntN(4) == 0 {
				d.Job.Ref.Namespace = []string{"team0", "team0/x", "team", "team0.x"}[r.IntN(4)]
				d.Job.Ref.ID = []string{"a", "x/a", "b"}[r.IntN(3)]
				d.Group = []string{"main", "aux"}[r.IntN(2)]
			}
			d.Requeued = r.IntN(8) == 0
			d.Preempted = r.IntN(3) == 0
			if r.IntN(5) == 0 {
				d.Job.Promoted, d.Job.Priority = true, d.Job.Priority+r.IntN(12)
			}
		}
		want := referenceOrder(New(p), s)
		hints := map[string][]int32{"none": nil}
		right := make([]int32, len(s.Waiting))
		for i := range right {
			right[i] = int32(i)
		}
		slices.SortFunc(right, func(a, b int32) int {
			da, db := &s.Waiting[a], &s.Waiting[b]
			if c := da.Since.Compare(db.Since); c != 0 {
				return c
			}
			if c := cmp.Compare(da.Job.Ref.String(), db.Job.Ref.String()); c != 0 {
				return c
			}
			if c := cmp.Compare(da.Group, db.Group); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		hints["right"] = right
		shuffled := slices.Clone(right)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		hints["shuffled"] = shuffled
		dup := slices.Clone(right)
		dup[1] = dup[0]
		hints["duplicate"] = dup
		hints["short"] = right[1:]
		outOfRange := slices.Clone(right)
		outOfRange[2] = int32(len(right))
		hints["out of range"] = outOfRange
		for name, hint := range hints {
			s.WaitingOrder = hint
			got := demandNames(New(p), s)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d, hint %s: order differs from one sort\n got %v\nwant %v", seed, name, got, want)
			}
		}
	}
}

// demandNames is the order of a plan's pending demands, by name and since.
func demandNames(e *Engine, s *Snapshot) []string {
	var names []string
	for _, p := range newState(e, s, t0).orderDemands() {
		names = append(names, fmt.Sprintf("%s/%s@%d", p.d.Job.Ref, p.d.Group, p.w))
	}
	return names
}

// referenceOrder sorts the pending demands by their whole key at once, as
// sortDemands did before it sorted in two steps.
func referenceOrder(e *Engine, s *Snapshot) []string {
	st := newState(e, s, t0)
	order := st.orderDemands()
	type key struct {
		rank, share uint64
		fresh       bool
		since       time.Time
		name, group string
		w           int32
	}
	keyOf := func(p *pending) key {
		var rank uint64
		if p.back {
			rank |= 1 << 24
		}
		rank |= (0xff - clampByte(e.tiers[p.tier].priority)) << 16
		if !p.under {
			rank |= 1 << 8
		}
		rank |= 0xff - clampByte(p.prio)
		return key{rank: rank, share: floatKey(st.share(p.tenant)), fresh: e.preemptedFirst && !p.d.Preempted,
			since: p.d.Since, name: p.d.Job.Ref.String(), group: p.d.Group, w: p.w}
	}
	slices.SortFunc(order, func(a, b pending) int {
		ka, kb := keyOf(&a), keyOf(&b)
		if c := cmp.Compare(ka.rank, kb.rank); c != 0 {
			return c
		}
		if c := cmp.Compare(ka.share, kb.share); c != 0 {
			return c
		}
		if ka.fresh != kb.fresh {
			if kb.fresh {
				return -1
			}
			return 1
		}
		if c := ka.since.Compare(kb.since); c != 0 {
			return c
		}
		if c := cmp.Compare(ka.name, kb.name); c != 0 {
			return c
		}
		if c := cmp.Compare(ka.group, kb.group); c != 0 {
			return c
		}
		return cmp.Compare(ka.w, kb.w)
	})
	var names []string
	for _, p := range order {
		names = append(names, fmt.Sprintf("%s/%s@%d", p.d.Job.Ref, p.d.Group, p.w))
	}
	return names
}

// TestCompareJoined: compareJoined orders as comparing the joined strings.
func TestCompareJoined(t *testing.T) {
	parts := []string{"", "a", "b", "/", "a/", "ab", "a/b", "a.b", "b/a", "aa"}
	for _, a1 := range parts {
		for _, a2 := range parts {
			for _, b1 := range parts {
				for _, b2 := range parts {
					want := cmp.Compare(a1+"/"+a2, b1+"/"+b2)
					if got := compareJoined(a1, a2, b1, b2); got != want {
						t.Fatalf("compareJoined(%q, %q, %q, %q) = %d, want %d", a1, a2, b1, b2, got, want)
					}
				}
			}
		}
	}
}
