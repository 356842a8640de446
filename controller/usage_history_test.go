package controller

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestFoldSamples: samples folded out of the window answer, for every
// threshold, the same start of the idle run that reaches into them.
func TestFoldSamples(t *testing.T) {
	series := func(utils ...float64) []engine.Sample {
		out := make([]engine.Sample, len(utils))
		for i, u := range utils {
			out[i] = engine.Sample{At: t0.Add(time.Duration(i) * 10 * time.Second), Util: u}
		}
		return out
	}
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]float64, 500)
	for i := range random {
		random[i] = float64(rng.IntN(100))
	}
	cases := []struct {
		name  string
		utils []float64
		cut   int // how many fall out of the window
		// kept is how many samples the folded part keeps.
		kept int
	}{
		{name: "idle all along: the first old sample is the run's start", utils: []float64{2, 2, 2, 2, 2, 2, 2, 2}, cut: 6, kept: 2},
		{name: "busy then idle: the last busy sample and the one after it", utils: []float64{90, 90, 90, 2, 2, 2, 2, 2}, cut: 6, kept: 4},
		{name: "activity falling in steps: each step kept", utils: []float64{90, 50, 30, 20, 5, 5, 2, 2}, cut: 6, kept: 6},
		{name: "activity rising: the newest old sample only, and the first", utils: []float64{2, 5, 20, 50, 90, 90, 2, 2}, cut: 6, kept: 2},
		{name: "two old samples: kept as they are", utils: []float64{90, 2, 2}, cut: 2, kept: 2},
		{name: "random activity", utils: random, cut: 400, kept: -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			all := series(tc.utils...)
			folded := append(foldSamples(append([]engine.Sample(nil), all[:tc.cut]...)), all[tc.cut:]...)
			if got := len(folded) - (len(all) - tc.cut); tc.kept >= 0 && got != tc.kept {
				t.Errorf("folded part keeps %d samples, want %d: %v", got, tc.kept, folded)
			}
			if len(folded)-(len(all)-tc.cut) > maxFoldedSamples {
				t.Errorf("folded part keeps %d samples, more than %d", len(folded)-(len(all)-tc.cut), maxFoldedSamples)
			}
			for threshold := 0.5; threshold <= 100; threshold++ {
				want, wok := engine.IdleSince(all, threshold)
				got, gok := engine.IdleSince(folded, threshold)
				if tc.kept < 0 && gok && wok && got.After(want) {
					// Folding at most maxFoldedSamples may start a run
					// later, never earlier.
					continue
				}
				if !got.Equal(want) || gok != wok {
					t.Errorf("threshold %.1f: idle since %v (%v), want %v (%v)", threshold, got, gok, want, wok)
				}
			}
		})
	}
}

// TestUsageStoreFoldsWindow: an allocation idle longer than the store's
// window keeps its idle stretch's start, and the store keeps no more than
// the window and the folded samples.
func TestUsageStoreFoldsWindow(t *testing.T) {
	u := newUsageStore()
	for i := range 6 * 360 { // six hours of sweeps, 10 s apart: busy for one, idle for five
		util := 2.0
		if i < 360 {
			util = 90
		}
		u.add("a", engine.Sample{At: t0.Add(time.Duration(i) * 10 * time.Second), Util: util})
	}
	since, ok := u.idleSince("a", 10)
	if want := t0.Add(time.Hour); !ok || !since.Since.Equal(want) {
		t.Errorf("idle since %v (%v), want %v", since.Since, ok, want)
	}
	if n := len(u.byAlloc["a"]); n > 721+maxFoldedSamples {
		t.Errorf("%d samples kept, want at most the window's 721 and %d folded", n, maxFoldedSamples)
	}
	if got := recentSamples(u.byAlloc["a"], u.window); len(got) != 721 || !got[0].At.Equal(t0.Add(4*time.Hour-10*time.Second)) {
		t.Errorf("recent samples: %d from %v, want 721 from %v", len(got), got[0].At, t0.Add(4*time.Hour-10*time.Second))
	}
}

// TestIdleTail: the samples a plan is given answer every idle rule's
// question as the whole history does: since when under its threshold, and
// the mean since.
func TestIdleTail(t *testing.T) {
	series := func(utils ...float64) []engine.Sample {
		out := make([]engine.Sample, len(utils))
		for i, u := range utils {
			out[i] = engine.Sample{At: t0.Add(time.Duration(i) * 10 * time.Second), Util: u}
		}
		return out
	}
	mean := func(s []engine.Sample, since time.Time) float64 {
		var sum float64
		n := 0
		for _, x := range s {
			if !x.At.Before(since) {
				sum, n = sum+x.Util, n+1
			}
		}
		return sum / float64(max(n, 1))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	random := make([]float64, 300)
	for i := range random {
		random[i] = float64(rng.IntN(40))
	}
	cases := []struct {
		name  string
		utils []float64
		top   float64
		want  int // samples in the tail
	}{
		{name: "busy now: the newest sample only", utils: []float64{2, 2, 90, 90}, top: 10, want: 1},
		{name: "idle since the last busy sample: it and the stretch", utils: []float64{90, 90, 2, 3, 2}, top: 10, want: 4},
		{name: "idle all along: everything", utils: []float64{2, 3, 2}, top: 10, want: 3},
		{name: "no idle rule: the newest sample only", utils: []float64{2, 3, 2}, top: -1, want: 1},
		{name: "random activity under two rules' thresholds", utils: random, top: 25, want: -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			all := series(tc.utils...)
			tail := idleTail(all, tc.top)
			if tc.want >= 0 && len(tail) != tc.want {
				t.Errorf("tail of %d samples, want %d", len(tail), tc.want)
			}
			for threshold := 0.5; threshold <= tc.top; threshold++ {
				want, wok := engine.IdleSince(all, threshold)
				got, gok := engine.IdleSince(tail, threshold)
				if !got.Equal(want) || gok != wok || (wok && mean(tail, got) != mean(all, want)) {
					t.Errorf("threshold %.1f: idle since %v (%v, mean %.2f), want %v (%v, mean %.2f)", threshold, got, gok, mean(tail, got), want, wok, mean(all, want))
				}
			}
		})
	}
}

// TestUsageStoreKeepsWhatIsRead: each allocation keeps the samples its
// readers read (sampleReads): a busy one its newest, an idle one its
// stretch and the busy sample before it, one no rule covers its newest,
// one of a snoozed job (or not seen by a round yet) everything.
func TestUsageStoreKeepsWhatIsRead(t *testing.T) {
	pol := testPolicy(t)
	nb := job("ml", "nb", "interactive", 60, 1, 1)
	idle := job("ml", "idle", "interactive", 60, 1, 1)
	train := job("ml", "train", "training", 40, 1, 1)
	snoozed := job("ml", "snoozed", "interactive", 60, 1, 1)
	obs := &Observation{Jobs: map[jobKey]*ObservedJob{}}
	for _, j := range []*ObservedJob{nb, idle, train, snoozed} {
		obs.Jobs[jobKey{j.Namespace, j.ID}] = j
		obs.Allocs = append(obs.Allocs, ObservedAlloc{ID: "a-" + j.ID, Namespace: j.Namespace, JobID: j.ID, Group: "work"})
	}
	states := map[jobKey]*JobState{{"ml", "snoozed"}: {Namespace: "ml", ID: "snoozed", Snooze: &SnoozeState{At: t0}}}
	u := newUsageStore()
	u.keepFor(sampleReads(pol, obs, states))
	utils := map[string][]float64{
		"a-nb":      {2, 2, 90, 2, 90},
		"a-idle":    {90, 90, 2, 2, 3},
		"a-train":   {90, 90, 90, 90, 90},
		"a-snoozed": {2, 90, 90, 2, 90},
		"a-unseen":  {2, 90, 90, 2, 90},
	}
	for id, us := range utils {
		for i, x := range us {
			u.add(id, engine.Sample{At: t0.Add(time.Duration(i) * 10 * time.Second), Util: x})
		}
	}
	for id, want := range map[string]int{"a-nb": 1, "a-idle": 4, "a-train": 1, "a-snoozed": 5, "a-unseen": 5} {
		if got := len(u.history(id)); got != want {
			t.Errorf("%s keeps %d samples, want %d: %v", id, got, want, u.history(id))
		}
	}
}
