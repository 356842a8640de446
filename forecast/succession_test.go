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
