package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestKeepMarksLeavesWorkPlacedNow: a placeholder kept for a held
// beneficiary's new marks leaves the free GPUs set aside for work in
// Nomad's queue, which Nomad places on them in this round
// (nomadmodel.PlacingMarks), as the controller's wantedPlaceholders does.
// Before, it held them too: the queued work waited for GPUs set aside for
// it, or another victim was preempted in vain.
func TestKeepMarksLeavesWorkPlacedNow(t *testing.T) {
	tests := []struct {
		name     string
		free     int // free GPUs on the node
		placing  int // GPUs set aside there for queued work (Y)
		yState   jobState
		wantHeld int // of X's 4 GPUs set aside
	}{
		{"free GPUs beside the queued work's: held", 6, 4, queued, 2},
		{"all free GPUs the queued work's: none held", 4, 4, queued, 0},
		{"set aside for held work: its placeholder's own, counted once", 8, 4, held, 4},
		{"nothing set aside for others: all held", 8, 0, queued, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := oneNodeSteward(t, `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
X,0,8,1,3600,ml,training,never
Y,0,4,1,3600,ml,training,never`)
			x, y := s.byRef[engine.JobRef{Namespace: "ml", ID: "X"}], s.byRef[engine.JobRef{Namespace: "ml", ID: "Y"}]
			s.jobs[x].state, s.jobs[y].state = held, tt.yState
			s.cl.free[0] = tt.free
			if tt.placing > 0 {
				s.marks = append(s.marks, simMark{node: 0, gpus: tt.placing, bene: y, until: time.Hour})
			}
			s.keepMarks([]engine.Earmark{{NodeID: s.cl.nodeIDs[0], GPUs: 4, For: s.jobs[x].ref, ForGroup: "main"}})
			got := s.marks[len(s.marks)-1]
			if got.bene != x || got.held != tt.wantHeld {
				t.Errorf("X's mark holds %d GPUs (bene %d), want %d", got.held, got.bene, tt.wantHeld)
			}
		})
	}
}

// TestHeldOnceFreed: GPUs promised to a held beneficiary while still
// draining (an Earmark beside another victim's surplus, held 0 when
// promised) are held by its placeholder once they free, while it waits,
// as the controller's wantedPlaceholders does each round
// (nomadmodel.Holds): work in Nomad's queue cannot take them. GPUs freed
// for work placed now count as its own only up to what it asks for
// (nomadmodel.PlacingMarks). Before, a mark held only the GPUs free at
// the plan that made it, and the freed surplus of a 4-GPU victim stopped
// for a 1-GPU job went to whatever Nomad placed next (issue 31).
func TestHeldOnceFreed(t *testing.T) {
	const (
		unchecked = iota // Z placed or not: not checked
		placed           // Z (1 GPU, queued) runs
		waits            // Z stays queued
	)
	tests := []struct {
		name     string
		xGPUs    int      // X, queued: its victim's 4 freed GPUs are set aside for it (0: no X)
		yState   jobState // Y, 4 GPUs, promised 3 GPUs on the node
		yHeld    int      // of them, held by its placeholder before
		yUntil   time.Duration
		vHeld    int // V, held, its placeholder holding these on the node
		wantHeld int // of Y's 3
		z        int
	}{
		{"freed beside a 1-GPU beneficiary's GPUs: held", 1, held, 0, time.Hour, 0, 3, waits},
		{"freed for work that takes them all: not held", 4, held, 0, time.Hour, 0, 0, waits},
		{"partly held when promised, the rest freed since: grows", 0, held, 1, time.Hour, 0, 3, placed},
		{"another placeholder holds some: the rest", 0, held, 0, time.Hour, 2, 2, waits},
		{"beneficiary placed now: nothing held", 0, queued, 0, time.Hour, 0, 0, unchecked},
		{"lapsed: nothing held", 0, held, 0, 0, 0, 0, placed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := oneNodeSteward(t, fmt.Sprintf(`
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
W,0,4,1,3600,ml,training,never
X,0,%d,1,3600,ml,training,never
Y,0,4,1,3600,ml,training,never
Z,0,1,1,3600,ml,training,never
V,0,2,1,3600,ml,training,never`, max(tt.xGPUs, 1)))
			ref := func(id string) int32 { return s.byRef[engine.JobRef{Namespace: "ml", ID: id}] }
			w, x, y, z, v := ref("W"), ref("X"), ref("Y"), ref("Z"), ref("V")
			s.start(w, []int{0}) // 4 of the node's 8 GPUs run W; the other 4 were a victim's
			s.setState(y, tt.yState)
			s.marks = append(s.marks, simMark{node: 0, gpus: 3, bene: y, until: tt.yUntil, held: tt.yHeld})
			if tt.xGPUs > 0 {
				s.setState(x, queued)
				s.enqueue(x)
				s.marks = append(s.marks, simMark{node: 0, gpus: 4, bene: x, until: time.Hour})
			}
			if tt.vHeld > 0 {
				s.setState(v, held)
				s.marks = append(s.marks, simMark{node: 0, gpus: tt.vHeld, bene: v, until: time.Hour, held: tt.vHeld})
			}
			s.setState(z, queued)
			s.enqueue(z)
			s.keepMarks(nil) // a plan that promises nothing new

			if got := s.marks[0]; got.bene != y || got.held != tt.wantHeld {
				t.Errorf("Y's mark holds %d GPUs (bene %d), want %d", got.held, got.bene, tt.wantHeld)
			}
			s.placeQueued()
			if tt.xGPUs > 0 && s.jobs[x].state != running {
				t.Errorf("X %v, want running on GPUs freed for it", s.jobs[x].state)
			}
			if st := s.jobs[z].state; (tt.z == placed && st != running) || (tt.z == waits && st != queued) {
				t.Errorf("Z %v, want %s", st, map[int]string{placed: "running", waits: "queued"}[tt.z])
			}
		})
	}
}

// oneNodeSteward is Steward under tinyPolicy on one 8-GPU node, with the
// jobs of trace (CSV) not yet arrived.
func oneNodeSteward(t *testing.T, trace string) *simulator {
	t.Helper()
	p := mustPolicy(t, tinyPolicy)
	tr := mustTrace(t, trace)
	if _, err := Derive(tr, DeriveOptions{Seed: 1, Policy: p, Nodes: 1, GPUsPerNode: 8}); err != nil {
		t.Fatal(err)
	}
	s, err := newSimulator(tr.Jobs, Config{Policy: p, Nodes: 1, GPUsPerNode: 8, CheckpointEvery: 20 * time.Minute,
		CheckpointCost: time.Minute, PlanInterval: 30 * time.Second}, Steward)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
