package engine

import (
	"cmp"
	"encoding/json"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"testing"
	"time"
)

// TestRadixSort holds radixSort to a stable comparison sort by key: the
// plan's orders (victims, demands by time and by class) depend on ties
// keeping their order.
func TestRadixSort(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	gen := func(n int, key func(i int) uint64) []candKey {
		ks := make([]candKey, n)
		for i := range ks {
			ks[i] = candKey{key: key(i), ui: int32(i)}
		}
		return ks
	}
	for _, c := range []struct {
		name string
		keys []candKey
	}{
		{"no keys", nil},
		{"one key", gen(1, func(int) uint64 { return 7 })},
		{"all equal: the order stays", gen(100, func(int) uint64 { return 1 << 40 })},
		{"few values, many ties", gen(2000, func(int) uint64 { return uint64(r.IntN(5)) << 33 })},
		{"every byte varies", gen(3000, func(int) uint64 { return r.Uint64() })},
		{"the top bit decides", gen(500, func(i int) uint64 { return uint64(i%2)<<63 | uint64(r.IntN(3)) })},
		{"descending", gen(1000, func(i int) uint64 { return uint64(1000-i) << 19 })},
		{"few keys, by comparison", gen(radixFrom, func(i int) uint64 { return uint64(r.IntN(4)) << 50 })},
		{"one more than that, by radix", gen(radixFrom+1, func(i int) uint64 { return uint64(r.IntN(4)) << 50 })},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := slices.Clone(c.keys)
			slices.SortStableFunc(want, func(a, b candKey) int { return cmp.Compare(a.key, b.key) })
			got, spare := radixSort(slices.Clone(c.keys), make([]candKey, len(c.keys)))
			if !slices.Equal(got, want) {
				t.Errorf("radixSort differs from a stable sort by key")
			}
			if len(spare) != len(c.keys) {
				t.Errorf("spare of %d keys, want %d", len(spare), len(c.keys))
			}
		})
	}
}

// TestSortTimes holds sortTimes to the comparison sort byTime did before:
// by second, nanosecond, then names and index, for times before 1970,
// centuries apart, and many of one instant.
func TestSortTimes(t *testing.T) {
	names := []struct{ ns, id, group string }{{"a", "x", "g"}, {"a", "x", "f"}, {"a/x", "", "g"}, {"b", "a", "g"}}
	for _, c := range []struct {
		name  string
		since func(r *rand.Rand) time.Time
	}{
		{"one instant: names and index decide", func(*rand.Rand) time.Time { return t0 }},
		{"seconds apart", func(r *rand.Rand) time.Time { return t0.Add(-time.Duration(r.IntN(50)) * time.Second) }},
		{"nanoseconds apart", func(r *rand.Rand) time.Time { return t0.Add(time.Duration(r.IntN(4))) }},
		{"before and after 1970", func(r *rand.Rand) time.Time {
			return time.Unix(int64(r.IntN(5)-2)*86400*365, int64(r.IntN(3))*1e8)
		}},
		{"centuries apart", func(r *rand.Rand) time.Time {
			return time.Date(1600+r.IntN(3)*300, 1, 1, 0, 0, 0, r.IntN(2), time.UTC)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(11, 13))
			out := make([]pending, 400)
			keys := make([]timeKey, len(out))
			for i := range out {
				n := names[r.IntN(len(names))]
				d := &Demand{Job: Job{Ref: JobRef{Namespace: n.ns, ID: n.id}}, Group: n.group, Since: c.since(r)}
				out[i].d = d
				keys[i] = timeKey{sec: d.Since.Unix(), nsec: int32(d.Since.Nanosecond()), p: int32(i)}
			}
			compare := func(a, b timeKey) int {
				if c := cmp.Compare(a.sec, b.sec); c != 0 {
					return c
				}
				if c := cmp.Compare(a.nsec, b.nsec); c != 0 {
					return c
				}
				da, db := out[a.p].d, out[b.p].d
				if c := compareJoined(da.Job.Ref.Namespace, da.Job.Ref.ID, db.Job.Ref.Namespace, db.Job.Ref.ID); c != 0 {
					return c
				}
				if c := cmp.Compare(da.Group, db.Group); c != 0 {
					return c
				}
				return cmp.Compare(a.p, b.p)
			}
			want := slices.Clone(keys)
			slices.SortFunc(want, compare)
			sc := &scratch{}
			sc.sortTimes(keys, compare)
			if !slices.Equal(keys, want) {
				t.Errorf("sortTimes differs from slices.SortFunc")
			}
		})
	}
}

// TestPlanActionsOwnTheirMemory: a plan's actions are written in its
// engine's scratch and copied out at the end (ownActions). A plan must
// keep its actions when the same engine plans again in that memory, and a
// plan with no actions has none (nil), as before. The plans run on one
// goroutine, one after another, with the collector off, so that the pool
// hands the same scratch back (sync.Pool keeps one per processor and
// drops it at collections).
func TestPlanActionsOwnTheirMemory(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	p := genPolicy(8, 300*8/16, 300*8/4)
	e := New(p)
	gen := func(seed uint64, nodes int) *Snapshot {
		r := rand.New(rand.NewPCG(seed, 2))
		return genCluster(r, nodes, 8, nodes*10, nodes, 8, t0)
	}
	renamed := func(s *Snapshot) *Snapshot { // other jobs: other actions
		for i := range s.Allocs {
			s.Allocs[i].Job.Ref.ID += "-other"
		}
		for i := range s.Waiting {
			s.Waiting[i].Job.Ref.ID += "-other"
		}
		return s
	}
	first := e.Plan(gen(1, 300), t0)
	before, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		s    *Snapshot
		none bool
	}{
		{"a smaller plan after it, in its memory", renamed(gen(3, 40)), false},
		{"a larger plan after it", renamed(gen(2, 400)), false},
		{"an empty cluster after it", &Snapshot{}, true},
	} {
		next := e.Plan(c.s, t0)
		if c.none != (next.Actions == nil) {
			t.Errorf("%s: %d actions, nil %v, want nil %v", c.name, len(next.Actions), next.Actions == nil, c.none)
		}
		if after, err := json.Marshal(first); err != nil || string(after) != string(before) {
			t.Errorf("%s: the first plan changed when its engine planned again (%v)", c.name, err)
		}
	}
	t.Run("ownActions copies and clears", func(t *testing.T) {
		sc := &scratch{}
		buf := []Action{{Kind: Preempt, Group: "g"}, {Kind: Hold, Group: "h"}}
		own := sc.ownActions(buf)
		if len(own) != 2 || own[0].Group != "g" || &own[0] == &buf[0] {
			t.Errorf("own %+v is not a copy of the buffer", own)
		}
		if buf[0].Group != "" || len(sc.actions) != 0 || cap(sc.actions) != 2 {
			t.Errorf("the buffer kept %q (len %d, cap %d), want it cleared and kept", buf[0].Group, len(sc.actions), cap(sc.actions))
		}
	})
}
