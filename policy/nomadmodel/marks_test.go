package nomadmodel_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
)

// TestMarks: GPUs set aside for a beneficiary lapse as the controller's
// do (controller/earmarks.go): those its victims gave back MarkTTL after
// the last drain for it ends, the free ones a preemption counted on
// beside its victims' MarkTTL after the victims' grace. Before, the
// model kept them for as long as the beneficiary waited.
func TestMarks(t *testing.T) {
	bene := engine.JobRef{Namespace: "ml", ID: "bene"}
	drain := nomadmodel.SignalDelay + 2*time.Minute
	for _, tc := range []struct {
		name string
		// graces of the victims' preemptions for bene, one node each
		graces []time.Duration
		// beside: the plan also counts on 2 free GPUs on node free
		beside bool
		at     time.Duration
		want   []string
	}{
		{"given back: set aside once the victim stops", []time.Duration{2 * time.Minute}, false, drain, []string{"n0 4"}},
		{"given back: lapsed MarkTTL after", []time.Duration{2 * time.Minute}, false, drain + nomadmodel.MarkTTL, nil},
		{"given back: kept while another victim drains for it", []time.Duration{2 * time.Minute, 5 * time.Minute}, false,
			drain + 2*nomadmodel.MarkTTL, []string{"n0 4"}},
		{"beside: set aside while the victim drains", []time.Duration{2 * time.Minute}, true, time.Minute, []string{"free 2"}},
		{"beside: lapsed MarkTTL after the grace", []time.Duration{2 * time.Minute}, true, drain + nomadmodel.MarkTTL, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			nodes := []engine.Node{{ID: "free", GPUs: 2}}
			for i := range tc.graces {
				nodes = append(nodes, engine.Node{ID: fmt.Sprintf("n%d", i), GPUs: 4})
			}
			c, err := nomadmodel.New(nodes)
			if err != nil {
				t.Fatal(err)
			}
			// Held, never placed: it waits throughout.
			if _, err := c.AddGroup(nomadmodel.Group{Job: engine.Job{Ref: bene, Priority: 60}, Name: "w", GPUsPerAlloc: 8, Held: 1}); err != nil {
				t.Fatal(err)
			}
			plan := &engine.Plan{}
			for i, grace := range tc.graces {
				ref := engine.JobRef{Namespace: "ml", ID: fmt.Sprintf("victim%d", i)}
				g, err := c.AddGroup(nomadmodel.Group{Job: engine.Job{Ref: ref, Priority: 40}, Name: "w", GPUsPerAlloc: 4, Count: 1})
				if err != nil {
					t.Fatal(err)
				}
				id, err := c.Start(g, fmt.Sprintf("n%d", i), t0.Add(-time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				plan.Actions = append(plan.Actions, engine.Action{Kind: engine.Preempt, Job: ref, Group: "w", Allocs: []string{id},
					Signal: "SIGUSR1", Grace: grace, For: &bene, ForGroup: "w"})
			}
			if tc.beside {
				plan.Earmarks = []engine.Earmark{{NodeID: "free", GPUs: 2, For: bene, ForGroup: "w"}}
			}
			if err := c.CarryOut(plan, t0); err != nil {
				t.Fatal(err)
			}
			if tc.at > drain {
				c.Advance(t0.Add(drain)) // the first victim stops in the round after its grace
			}
			c.Advance(t0.Add(tc.at))
			var got []string
			for _, m := range c.Snapshot().Earmarks {
				if m.For == bene {
					got = append(got, fmt.Sprintf("%s %d", m.NodeID, m.GPUs))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("set aside at %s: got %q, want %q", tc.at, got, tc.want)
			}
		})
	}
}

// TestComplete: a job whose allocations complete frees its GPUs and
// leaves Nomad's queue, and may be registered again; DrainsEnd says when
// the last victim of the drains in progress stops.
func TestComplete(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, _ := nomadmodel.New([]engine.Node{{ID: "n0", GPUs: 4}})
	job := engine.Job{Ref: engine.JobRef{Namespace: "ml", ID: "a"}, Priority: 40}
	g, _ := c.AddGroup(nomadmodel.Group{Job: job, Name: "w", GPUsPerAlloc: 4, Count: 2})
	c.Place(t0)
	if q := c.Queued(g); q != 1 {
		t.Fatalf("queued %d, want 1 (one of two fits)", q)
	}
	id := c.Snapshot().Allocs[0].ID
	if err := c.Apply(engine.Action{Kind: engine.Preempt, Job: job.Ref, Group: "w", Allocs: []string{id}, Signal: "SIGUSR1",
		Grace: time.Minute}, t0); err != nil {
		t.Fatal(err)
	}
	if end := c.DrainsEnd(); !end.Equal(t0.Add(nomadmodel.SignalDelay + time.Minute)) {
		t.Errorf("drains end %s, want the signal delay and the grace after the decision", end)
	}
	c.Complete(job.Ref)
	if s := c.Snapshot(); len(s.Allocs)+len(s.Waiting) != 0 || !c.DrainsEnd().IsZero() {
		t.Fatalf("after completing: %d allocations, %d waiting, drains end %s", len(s.Allocs), len(s.Waiting), c.DrainsEnd())
	}
	if _, err := c.AddGroup(nomadmodel.Group{Job: job, Name: "w", GPUsPerAlloc: 4, Count: 1}); err != nil {
		t.Fatalf("registered again: %v", err)
	}
	if c.Place(t0); len(c.Snapshot().Allocs) != 1 {
		t.Error("the GPUs it freed were not free")
	}
}
