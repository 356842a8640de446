package engine

import (
	"strings"
	"testing"
	"time"
)

func TestAppendDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1500 * time.Millisecond, "2s"},
		{45 * time.Second, "45s"},
		{time.Minute, "1m"},
		{17*time.Minute + 20*time.Second, "17m20s"},
		{17*time.Minute + 400*time.Millisecond, "17m"},
		{time.Hour, "1h"},
		{time.Hour + 12*time.Minute + 31*time.Second, "1h13m"},
		{26 * time.Hour, "26h"},
	} {
		if got := string(appendDuration([]byte("x"), c.d)); got != "x"+c.want {
			t.Errorf("appendDuration(%v) = %q, want %q", c.d, got[1:], c.want)
		}
	}
}

// TestMsg checks the reason builder's pieces and that a finished reason
// keeps its text when the buffer is reused.
func TestMsg(t *testing.T) {
	var m msg
	d := &Demand{Job: Job{Ref: JobRef{"ml", "train"}}, Group: "main"}
	first := m.start("tenant ", "ml", " holds ").gpus(1).s(", ").gpus(1234).s(" for ").demand(d).reason(RuleReclaim)
	second := m.start("waiting ").dur(90 * time.Minute).s(", priority ").n(-3).reason(RulePromoteAge)
	for _, c := range []struct{ got, want string }{
		{first.Message, "tenant ml holds 1 GPU, 1234 GPUs for ml/train/main"},
		{second.Message, "waiting 1h30m, priority -3"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestCapacityReasonCounts: a capacity wait says "1 GPU", not "1 GPUs"
// (a finding of issue #17), and the largest node's size when nothing fits.
func TestCapacityReasonCounts(t *testing.T) {
	train := Job{Ref: JobRef{"research", "train"}, Tier: "training", Priority: 40}
	cases := []struct {
		name string
		gpus int
		want string
	}{
		{"one GPU", 1, "needs 1 GPU on one node in any node; none free"},
		{"larger than any node", 9, "needs 9 GPUs on one node; the largest node has 4"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Snapshot{
				Nodes:  []Node{{ID: "n1", NodePool: "default", GPUs: 4}},
				Allocs: []Alloc{{ID: "a1", Job: train, Group: "main", NodeID: "n1", GPUIDs: []string{"0", "1", "2", "3"}, StartedAt: t0.Add(-time.Hour)}},
				Waiting: []Demand{{Job: Job{Ref: JobRef{"research", "more"}, Tier: "training", Priority: 40}, Group: "main",
					GPUsPerAlloc: tc.gpus, Count: 1, Since: t0}},
			}
			plan := New(testPolicy(nil)).Plan(s, t0)
			if len(plan.Waiting) != 1 || !strings.Contains(plan.Waiting[0].Reason.Message, tc.want) {
				t.Fatalf("waiting %+v, want a reason with %q", plan.Waiting, tc.want)
			}
		})
	}
}

// A demand that does not say since when it waits (the zero time) is not
// promoted for waiting: zero is not a wait of 292 years. (Seen at scale: a
// resumed job Nomad had not evaluated yet came without its place in line,
// and was promoted at once.)
func TestNoPromotionWithoutSince(t *testing.T) {
	p := testPolicy(nil)
	for _, tc := range []struct {
		name  string
		since time.Time
		want  bool
	}{
		{"waited 2h", t0.Add(-2 * time.Hour), true},
		{"waited 10m", t0.Add(-10 * time.Minute), false},
		{"since unknown", time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := &Snapshot{Nodes: []Node{{ID: "n1", GPUs: 1}},
				Allocs: []Alloc{{ID: "a", Job: Job{Ref: JobRef{"ml", "runner"}, Tier: "training", Priority: 40}, Group: "main", NodeID: "n1",
					GPUIDs: []string{"g0"}, StartedAt: t0.Add(-3 * time.Hour)}},
				Waiting: []Demand{{Job: Job{Ref: JobRef{"ml", "starved"}, Tier: "training", Priority: 40}, Group: "main",
					GPUsPerAlloc: 1, Count: 1, Since: tc.since, Held: true}}}
			promoted := false
			for _, a := range New(p).Plan(snap, t0).Actions {
				promoted = promoted || a.Kind == Promote
			}
			if promoted != tc.want {
				t.Errorf("promoted %v, want %v", promoted, tc.want)
			}
		})
	}
}
