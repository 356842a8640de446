package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// maxGangState is what a 64-allocation gang's saved state may take at any
// step of a preemption (issue #14: 4 KiB; Nomad's limit is 64 KiB).
const maxGangState = 4096

// A 64-allocation gang spread over 64 nodes is preempted for another job,
// signalled, finished (the GPUs it gives back set aside on every node) and
// its allocations stopped: its state stays under maxGangState throughout,
// idle timers for every allocation included.
func TestGangStateSize(t *testing.T) {
	f := newFakeNomad()
	clock := newTestClock(t0)
	c := testController(t, f, withClock(clock.now))
	gang := job("ml", "gang", "interactive", 40, 64, 1) // an idle rule covers it
	gang.Meta["steward.gang"] = "true"
	nbJob := job("ml", "nb", "interactive", 60, 1, 64)
	uuid := func(kind string, i int) string {
		return fmt.Sprintf("%08x-%s-4b1c-9d2e-5f6a7b8c9d0e", 0x1a2b3c00+i, kind)
	}
	var allocs []ObservedAlloc
	var nodes []ObservedNode
	var ids []string
	for i := range 64 {
		a := alloc(uuid("a11c", i), "gang")
		a.NodeID, a.GPUIDs, a.Name = uuid("e0de", i), []string{uuid("6b00", i)}, fmt.Sprintf("gang.work[%d]", i)
		allocs = append(allocs, a)
		ids = append(ids, a.ID)
		nodes = append(nodes, ObservedNode{ID: a.NodeID, Name: fmt.Sprintf("gpu-%02d", i), GPUs: 8})
	}
	nb := engine.JobRef{Namespace: "ml", ID: "nb"}
	size := func(step string) {
		t.Helper()
		st := c.states()[jobKey{"ml", "gang"}]
		items, err := st.encode()
		if err != nil {
			t.Fatal(err)
		}
		n := len(items["state"])
		t.Logf("%s: %d bytes", step, n)
		if n > maxGangState {
			t.Errorf("%s: the gang's state is %d bytes, more than %d:\n%s", step, n, maxGangState, items["state"])
		}
	}
	at := func(d time.Duration) *round {
		r := roundWith([]*ObservedJob{gang, nbJob}, allocs)
		r.now, r.obs.At, r.obs.Nodes = t0.Add(d), t0.Add(d), nodes
		clock.set(r.now)
		return r
	}
	for i, id := range ids { // idle for an hour: a timer per allocation
		c.usage.add(id, engine.Sample{At: t0.Add(-time.Hour), Util: float64(i % 5)})
		c.usage.add(id, engine.Sample{At: t0, Util: 1})
	}
	c.flush(context.Background(), at(0))
	size("idle timers")

	r := at(0)
	r.plan = &engine.Plan{Earmarks: []engine.Earmark{{NodeID: nodes[0].ID, GPUs: 7, For: nb, ForGroup: "work"}}}
	a := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "gang"}, Allocs: ids, GPUs: 64,
		Grace: 2 * time.Minute, Signal: "SIGUSR1", Requeue: true, For: &nb, ForGroup: "work",
		Reason: engine.Reason{Rule: engine.RulePriority, Message: "tier training (priority 40) yields 64 GPUs to ml/nb/work, tier interactive (priority 60)"}}
	if err := c.execute(context.Background(), r, a); err != nil {
		t.Fatal(err)
	}
	size("preempted")
	c.drains.finishDrains(context.Background(), at(signalDelay))
	size("signalled")
	c.drains.finishDrains(context.Background(), at(signalDelay+2*time.Minute))
	size("finished: the job held, its GPUs set aside for ml/nb")
	st := c.states()[jobKey{"ml", "gang"}]
	if len(st.Marks) != 65 || len(st.Draining) != 1 || !st.Draining[0].Finished {
		t.Fatalf("marks %d, drains %+v: the preemption did not finish as expected", len(st.Marks), st.Draining)
	}
	allocs = nil
	c.drains.finishDrains(context.Background(), at(signalDelay+2*time.Minute+5*time.Second))
	size("victims gone")

	// What is saved reads back as it was: the grouped marks and the
	// [node, gpus] pairs.
	items, _ := st.encode()
	back, err := decodeState(items)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Marks) != len(st.Marks) || back.Marks[63] != st.Marks[63] {
		t.Errorf("marks read back %+v, want %+v", back.Marks[63], st.Marks[63])
	}
}

// States earlier versions saved read as they meant: a mark per node, node
// GPUs as objects, full allocation IDs, and a per-minute usage history.
func TestStateReadsEarlierFormat(t *testing.T) {
	old := `{"namespace":"ml","id":"train","status":"preempted","updated":"2026-11-22T12:00:00Z",
	  "draining":[{"group":"work","allocs":["11111111-2222-3333-4444-555555555555"],"on":[{"node":"n1","gpus":2}],
	    "decided":"2026-11-22T12:00:00Z","signaled":"0001-01-01T00:00:00Z","deadline":"0001-01-01T00:00:00Z","requeue":true,"kind":"preempt","rule":"priority","reason":"r"}],
	  "marks":[{"node":"n1","gpus":2,"for":"ml/nb","group":"work","until":"2026-11-22T12:05:00Z","beside":true}],
	  "usage":{"11111111-2222-3333-4444-555555555555":[{"At":"2026-11-22T11:40:00Z","Util":2}]}}`
	st, err := decodeState(map[string]string{"state": old})
	if err != nil {
		t.Fatal(err)
	}
	d := st.Draining[0]
	if !d.has("11111111-2222-3333-4444-555555555555") || d.has("11111111-9999-3333-4444-555555555555") ||
		len(d.On) != 1 || d.On[0] != (NodeGPUs{Node: "n1", GPUs: 2}) {
		t.Errorf("drain read as %+v", d)
	}
	want := Mark{Node: "n1", GPUs: 2, For: "ml/nb", Group: "work", Until: time.Date(2026, 11, 22, 12, 5, 0, 0, time.UTC), Beside: true}
	if len(st.Marks) != 1 || st.Marks[0] != want {
		t.Errorf("marks read as %+v, want %+v", st.Marks, want)
	}
	if len(st.Usage["11111111-2222-3333-4444-555555555555"]) != 1 {
		t.Errorf("usage read as %+v", st.Usage)
	}
	b, _ := json.Marshal(st.Marks)
	if string(b) != `[{"for":"ml/nb","group":"work","until":"2026-11-22T12:05:00Z","beside":true,"on":[["n1",2]]}]` {
		t.Errorf("marks written as %s", b)
	}
}

// The status stays within a variable however many jobs are held or idle:
// the longest held and idle, and the queue's head, are kept, the rest
// counted.
func TestStatusFits(t *testing.T) {
	for _, n := range []int{10, 300, 3000, 30000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := Status{Updated: t0, Policy: "p"}
			for i := range n {
				s.Held = append(s.Held, HeldStatus{Job: fmt.Sprintf("research/train-%05d", i), Group: "work", Count: 1, GPUs: 8,
					State: StatusPreempted, Since: t0.Add(-time.Duration(i) * time.Minute),
					Reason: "tier training (priority 40) yields 8 GPUs to product/serve/work, tier inference (priority 90)"})
				s.Idle = append(s.Idle, IdleStatus{Job: fmt.Sprintf("product/nb-%05d", i), Alloc: fmt.Sprintf("%08x-1111-2222-3333-444455556666", i),
					GPUs: 1, Minutes: i % 120, Util: 2})
				s.Queue = append(s.Queue, QueueEntry{Job: fmt.Sprintf("research/train-%05d", i), Namespace: "research",
					ID: fmt.Sprintf("train-%05d", i), Tenant: "research", Tier: "training", Priority: 40, GPUs: 8, Position: i + 1,
					TenantPosition: i + 1, QueueLength: n, TenantQueueLength: n, WaitingSince: t0, Rule: "capacity",
					Reason:      "nothing may be preempted for tier training of tenant research (holds 9, reserve 4)",
					Unblock:     []string{"starts now if it asks for 2 GPUs instead of 8", "starts when product/serve ends (forecast: 14:30 UTC)"},
					ForecastP50: t0.Add(time.Hour), ForecastP90: t0.Add(2 * time.Hour), ForecastNote: "run times: 3 from similar jobs (as of 12:00 UTC)"})
			}
			for i := range 40 {
				s.Decisions = append(s.Decisions, Decision{At: t0, Kind: "preempt", Job: fmt.Sprintf("research/train-%05d", i), Reason: "r"})
			}
			full := fitStatus(&s, statusMaxBytes)
			if len(full) > statusMaxBytes {
				t.Fatalf("%d bytes, more than %d", len(full), statusMaxBytes)
			}
			if len(s.Held)+s.HeldOmitted != n || len(s.Idle)+s.IdleOmitted != n || len(s.Queue)+s.QueueOmitted != n {
				t.Errorf("held %d + %d omitted, idle %d + %d omitted, queue %d + %d omitted: want %d each",
					len(s.Held), s.HeldOmitted, len(s.Idle), s.IdleOmitted, len(s.Queue), s.QueueOmitted, n)
			}
			if len(s.Queue) > 0 && s.Queue[0].Position != 1 {
				t.Errorf("the queue's head was left out")
			}
			if n <= 10 && (s.HeldOmitted > 0 || s.IdleOmitted > 0 || s.QueueOmitted > 0 || len(s.Decisions) != 40) {
				t.Errorf("a small status lost entries")
			}
			if s.HeldOmitted > 0 {
				// The longest held stays: train-(n-1) held since t0-(n-1)m.
				if !slices.ContainsFunc(s.Held, func(h HeldStatus) bool { return h.Job == fmt.Sprintf("research/train-%05d", n-1) }) {
					t.Errorf("the longest-held job was left out")
				}
			}
			t.Logf("%d jobs: %d bytes, %d held, %d idle and %d queued shown, %d decisions", n, len(full), len(s.Held), len(s.Idle), len(s.Queue), len(s.Decisions))
		})
	}
}

// A status that changed only in idle minutes or utilisation is published
// at most once a minute; any other change at once.
func TestStatusWriteRate(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f)
	nbJob := job("ml", "nb", "interactive", 60, 1, 1)
	a := alloc("a1", "nb")
	r := roundWith([]*ObservedJob{nbJob}, []ObservedAlloc{a})
	r.plan = &engine.Plan{}
	publish := func(at time.Duration, util float64) int {
		r.now = t0.Add(at)
		c.usage.add(a.ID, engine.Sample{At: r.now, Util: util})
		c.pub.writeStatus(context.Background(), r, c.pol)
		return len(f.callsMatching("put steward steward/status"))
	}
	c.usage.add(a.ID, engine.Sample{At: t0.Add(-20 * time.Minute), Util: 1})
	steps := []struct {
		at   time.Duration
		util float64
		want int // status writes so far
	}{
		{0, 1, 1},
		{10 * time.Second, 2, 1},  // drift only
		{50 * time.Second, 3, 1},  // drift only
		{70 * time.Second, 2, 2},  // drift, a minute on
		{80 * time.Second, 95, 3}, // busy: no longer idle, a real change
	}
	for _, s := range steps {
		if got := publish(s.at, s.util); got != s.want {
			t.Errorf("at %s: %d status writes, want %d", s.at, got, s.want)
		}
	}
}

// States are written when something is decided: a group that only waits
// in Nomad's queue, and then runs, costs no write; a hold's index
// following Steward's own writes costs none either.
func TestWritesOnlyOnDecisions(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f)
	k := jobKey{"ml", "train"}
	queued := roundWith([]*ObservedJob{job("ml", "train", "training", 40, 1, 1)}, nil)
	queued.obs.Queued[k] = map[string]QueuedGroup{"work": {Count: 1, Since: t0.Add(-time.Minute)}}
	c.trackWaiting(queued)
	c.flush(context.Background(), queued)
	if st := c.states()[k]; st == nil || !st.waits() {
		t.Fatalf("the queued group's place in line is not kept in memory: %+v", st)
	}
	running := roundWith([]*ObservedJob{job("ml", "train", "training", 40, 1, 1)}, []ObservedAlloc{alloc("a1", "train")})
	c.trackWaiting(running)
	c.flush(context.Background(), running)
	if _, ok := c.states()[k]; ok {
		t.Errorf("the state of a job that runs, with nothing decided, stays in memory")
	}

	// A hold is written; its index following Steward's own scale is not.
	st := c.state(k)
	st.hold("work", 1, 1, "capacity", t0, 10)
	st.note(StatusHeld, engine.Reason{Rule: engine.RuleCapacity, Message: "full"}, t0)
	if err := c.save(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	st.Held["work"].Index = 11
	c.flush(context.Background(), running)
	if got := f.callsMatching("put "); len(got) != 1 {
		t.Errorf("writes %q: want only the hold's", got)
	}
}
