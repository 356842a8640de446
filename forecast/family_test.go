package forecast

import (
	"fmt"
	"testing"
	"time"
)

// TestFamilyEstimate: a family's own runs stand for its jobs once it has
// enough of them; with fewer, its class's do.
func TestFamilyEstimate(t *testing.T) {
	h, c := familyHistory()
	for _, tc := range []struct {
		name   string
		class  Class
		median time.Duration
	}{
		{"a family with enough runs: its own", c.WithFamily("short"), 4 * time.Minute},
		// Its class's families each weigh alike (family_prior.go): long,
		// short and new's own run, two of three at 4 minutes. The median
		// of the points alike, 72h, was not the distribution drawn from.
		{"a family with too few: its class's families alike", c.WithFamily("new"), 4 * time.Minute},
		{"no family: the class's", c, 72 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := h.Estimate(tc.class).median(); got != tc.median {
				t.Errorf("median run time of %s = %v, want %v", tc.class, got, tc.median)
			}
		})
	}
}

// TestJobFamily: a job's family is its ID less a trailing run number.
func TestJobFamily(t *testing.T) {
	for _, tc := range []struct{ name, id, want string }{
		{"a run number after a dash", "train-0412", "train"},
		{"no run number", "train", "train"},
		{"digits inside kept", "llama3-sft_17", "llama3-sft"},
		{"all number: its own", "12345", "12345"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := JobFamily(tc.id); got != tc.want {
				t.Errorf("JobFamily(%q) = %q, want %q", tc.id, got, tc.want)
			}
		})
	}
}

// TestFamiliesBounded: a tenant names families by its job IDs and may make
// every ID new: History keeps MaxFamilies of them apart, forgetting the
// one added to longest ago; their runs stay in the class's.
func TestFamiliesBounded(t *testing.T) {
	h := NewHistory()
	c := ClassOf("research", "training", 1)
	for range minSimilar {
		h.Add(c.WithFamily("kept"), 4*time.Minute)
	}
	for i := range MaxFamilies + 10 {
		h.Add(c.WithFamily(fmt.Sprintf("exp%x-", i)), 72*time.Hour)
		if i == MaxFamilies/2 {
			h.Add(c.WithFamily("kept"), 4*time.Minute) // still in use
		}
	}
	families := 0
	for k := range h.runs {
		if k.Family != "" {
			families++
		}
	}
	cases := []struct {
		name string
		ok   bool
	}{
		{"at most MaxFamilies families", families == MaxFamilies && h.families == MaxFamilies},
		{"the first ones are forgotten", h.runs[c.WithFamily("exp0-")] == nil},
		{"the newest is kept", h.runs[c.WithFamily(fmt.Sprintf("exp%x-", MaxFamilies+9))] != nil},
		{"one added to since is kept", h.Estimate(c.WithFamily("kept")).median() == 4*time.Minute},
		{"the class keeps every run", h.runs[c].added == MaxFamilies+10+minSimilar+1},
	}
	for _, tc := range cases {
		if !tc.ok {
			t.Errorf("%s: %d families (counted %d)", tc.name, families, h.families)
		}
	}
}

// familyHistory is one class's history in three families: "long" (10 runs
// of 3 days), "short" (enough 4-minute runs to stand for its jobs) and
// "new" (one 4-minute run: too few).
func familyHistory() (*History, Class) {
	h := NewHistory()
	c := ClassOf("platform", "training", 1)
	for range 10 {
		h.Add(c.WithFamily("long"), 72*time.Hour)
	}
	for range minSimilar {
		h.Add(c.WithFamily("short"), 4*time.Minute)
	}
	h.Add(c.WithFamily("new"), 4*time.Minute)
	return h, c
}
