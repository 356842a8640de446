package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestFencedWrites: a leader whose lease has expired (paused past its
// deadline, renewals failing) changes nothing in Nomad; reads still work.
func TestFencedWrites(t *testing.T) {
	ctx := context.Background()
	now := t0
	l := &lease{now: func() time.Time { return now }}
	f := newFakeNomad()
	n := fencedNomad{Nomad: f, lease: l}
	writes := []struct {
		name string
		call func() error
	}{
		{"signal", func() error { return n.Signal(ctx, "ml", "a1", "work", "SIGUSR1") }},
		{"stop", func() error { _, err := n.StopAlloc(ctx, "ml", "a1"); return err }},
		{"scale", func() error { _, err := n.Scale(ctx, "ml", "train", "work", 0, "m", nil, 0); return err }},
		{"priority", func() error { _, err := n.SetPriority(ctx, "ml", "train", 40, "r", 0); return err }},
		{"put", func() error { _, err := n.PutVar(ctx, "ml", "p", map[string]string{"k": "v"}, false, 0); return err }},
		{"delete", func() error { return n.DeleteVar(ctx, "ml", "p", 0) }},
		{"register", func() error {
			return n.RegisterJob(ctx, &api.Job{ID: ptr("steward-hold-1"), Namespace: ptr("steward")})
		}},
		{"purge", func() error { return n.PurgeJob(ctx, "steward", "steward-hold-1") }},
	}
	steps := []struct {
		name      string
		step      func()
		wantFence bool
	}{
		{"no election: nothing fenced", func() {}, false},
		{"just renewed", func() { l.extend(now, 15*time.Second) }, false},
		{"within the TTL of the renewal", func() { now = now.Add(14 * time.Second) }, false},
		{"past it: fenced", func() { now = now.Add(2 * time.Second) }, true},
		{"renewed again", func() { l.extend(now, 15*time.Second) }, false},
		{"lost (409): fenced at once", func() { l.end() }, true},
	}
	for _, s := range steps {
		s.step()
		for _, w := range writes {
			err := w.call()
			if got := errors.Is(err, errLostLease); got != s.wantFence {
				t.Errorf("%s: %s: err %v, want fenced %v", s.name, w.name, err, s.wantFence)
			}
		}
		if _, _, err := n.GetVar(ctx, "ml", "p"); err != nil {
			t.Errorf("%s: read refused: %v", s.name, err)
		}
	}
}
