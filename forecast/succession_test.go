package forecast

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestSuccession: short jobs a tenant's limit holds back follow each
// other within a replay's steps, as the engine resumes the next at each
// plan, instead of one per freed slot per step (Philly's burst: a
// thousand 3-minute jobs behind a limit, forecast past the horizon,
// started within a day).
func TestSuccession(t *testing.T) {
	e := testEngine(t)
	s := &engine.Snapshot{}
	for n := range 4 {
		s.Nodes = append(s.Nodes, node(fmt.Sprintf("n%d", n), 8))
	}
	est := map[engine.JobRef]Estimate{}
	const jobs = 800
	for i := range jobs {
		// Tenant a's limit is 8 GPUs: 8 run at a time, 3 minutes each, so
		// the last starts about 800 / 8 × 3 minutes = 5 hours from now.
		d := waiting("a", fmt.Sprintf("w%03d", i), "training", 1, 1, time.Duration(jobs-i)*time.Second)
		s.Waiting = append(s.Waiting, d)
		est[d.Job.Ref] = Estimate{Expected: 3 * time.Minute}
	}
	res := Run(context.Background(), Input{Engine: e, Snapshot: s, Now: t0, Estimates: est}, Options{Seed: 1})
	for _, tc := range []struct {
		name     string
		job      string
		from, to time.Duration
	}{
		{"the first eight at once", "w000", 0, time.Minute},
		{"the middle one after about 2.5 hours", "w400", 90 * time.Minute, 4 * time.Hour},
		{"the last one after about 5 hours", "w799", 3 * time.Hour, 8 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := res.Jobs[ref("a", tc.job)]
			if f == nil || f.P50.IsZero() {
				t.Fatalf("%s: no P50 (%+v), want one within %v–%v", tc.job, f, tc.from, tc.to)
			}
			if w := f.P50.Sub(t0); w < tc.from || w > tc.to {
				t.Errorf("%s: P50 after %v, want %v–%v", tc.job, w, tc.from, tc.to)
			}
		})
	}
}

// TestSuccessionForCapacity: short jobs waiting for the GPUs their own
// tenant's short runs hold in a full cluster follow each other on them
// within a replay's steps, as the engine starts the next on each GPU at
// the plan after it frees; before, one started per GPU per step, and
// steps grow to hours (Philly: a family of 3-minute jobs forecast at 50
// hours, started within 3.4). Work of another class waiting ahead of them
// still takes the first GPU that frees.
func TestSuccessionForCapacity(t *testing.T) {
	e := testEngine(t)
	const jobs = 800
	for _, tc := range []struct {
		name string
		// ahead: another tenant's long job waits before them for a GPU.
		ahead    bool
		job      string
		from, to time.Duration
	}{
		// 2 GPUs, 3 minutes a job: the 400th starts after about 400 / 2 ×
		// 3 minutes = 10 hours, the last after about 20.
		{"800 three-minute jobs on 2 GPUs: the 400th within 2x of 10 hours", false, "w400", 5 * time.Hour, 20 * time.Hour},
		{"800 three-minute jobs on 2 GPUs: the last within 2x of 20 hours", false, "w799", 10 * time.Hour, 40 * time.Hour},
		// b's job takes the first GPU that frees, for days: one GPU is
		// left, so the 400th starts after about 20 hours (not 10).
		{"another tenant's job ahead takes a GPU: the 400th after about 20 hours", true, "w400", 14 * time.Hour, 40 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &engine.Snapshot{Nodes: []engine.Node{node("n0", 2)}}
			est := map[engine.JobRef]Estimate{}
			for g := range 2 {
				a := running("c", fmt.Sprintf("r%d", g), "training", "n0", 1, time.Minute, g)
				s.Allocs = append(s.Allocs, a)
				est[a.Job.Ref] = Estimate{Expected: 3 * time.Minute}
			}
			if tc.ahead {
				d := waiting("b", "long", "training", 1, 1, time.Hour)
				s.Waiting = append(s.Waiting, d)
				est[d.Job.Ref] = Estimate{Expected: 30 * 24 * time.Hour}
			}
			for i := range jobs {
				d := waiting("c", fmt.Sprintf("w%03d", i), "training", 1, 1, time.Duration(jobs-i)*time.Second)
				s.Waiting = append(s.Waiting, d)
				est[d.Job.Ref] = Estimate{Expected: 3 * time.Minute}
			}
			if r := e.Plan(s, t0).Waiting[0].Reason.Rule; r != engine.RuleCapacity {
				t.Fatalf("the queue waits for %q, want %q", r, engine.RuleCapacity)
			}
			res := Run(context.Background(), Input{Engine: e, Snapshot: s, Now: t0, Estimates: est}, Options{Seed: 1})
			f := res.Jobs[ref("c", tc.job)]
			if f == nil || f.P50.IsZero() {
				t.Fatalf("%s: no P50 (%+v), want one within %v–%v", tc.job, f, tc.from, tc.to)
			}
			if w := f.P50.Sub(t0); w < tc.from || w > tc.to {
				t.Errorf("%s: P50 after %v, want %v–%v", tc.job, w, tc.from, tc.to)
			}
			if b := res.Jobs[ref("b", "long")]; tc.ahead && (b == nil || b.P50.IsZero() || b.P50.Sub(t0) > time.Hour) {
				t.Errorf("b/long, ahead of them: %+v, want a P50 within the hour (the first GPU freed)", b)
			}
		})
	}
}
