package controller

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestNomadCallsHaveDeadline: every Nomad call the controller makes, through
// the real API client, against a server that accepts requests and never
// answers, fails by the call deadline (-nomad-timeout) instead of hanging
// the round. Before, none had a deadline.
func TestNomadCallsHaveDeadline(t *testing.T) {
	hung := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hung:
		}
	}))
	defer srv.Close()
	defer close(hung)
	client, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 100 * time.Millisecond
	n := withDeadline(NewNomad(client), timeout)
	job := apiJob("ml", "train", "training", 40, 1, 1)
	cases := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"signal", func(ctx context.Context) error { return n.Signal(ctx, "ml", "a1", "work", "SIGUSR1") }},
		{"job exists", func(ctx context.Context) error { _, err := n.JobExists(ctx, "ml", "train"); return err }},
		{"stop allocation", func(ctx context.Context) error { _, err := n.StopAlloc(ctx, "ml", "a1"); return err }},
		{"scale", func(ctx context.Context) error {
			_, err := n.Scale(ctx, "ml", "train", "work", 0, "m", nil, 1)
			return err
		}},
		{"scale ahead", func(ctx context.Context) error { _, err := n.ScaleAhead(ctx, "ml", "train", "work", 1, 1); return err }},
		{"scale with policy", func(ctx context.Context) error {
			_, err := n.ScaleWithPolicy(ctx, "ml", "train", "work", 1, ScalingPolicy{}, "m", nil, 1, 0)
			return err
		}},
		{"set priority", func(ctx context.Context) error { _, err := n.SetPriority(ctx, "ml", "train", 40, "r", 1); return err }},
		{"move job", func(ctx context.Context) error { _, err := n.MoveJob(ctx, "ml", "train", "gpu", "r", 1); return err }},
		{"read variable", func(ctx context.Context) error { _, _, err := n.GetVar(ctx, "steward", "x"); return err }},
		{"write variable", func(ctx context.Context) error {
			_, err := n.PutVar(ctx, "steward", "x", map[string]string{"a": "b"}, true, 1)
			return err
		}},
		{"delete variable", func(ctx context.Context) error { return n.DeleteVar(ctx, "steward", "x", 1) }},
		{"list variables", func(ctx context.Context) error { _, err := n.ListVars(ctx, "steward", "x"); return err }},
		{"register placeholder", func(ctx context.Context) error { return n.RegisterJob(ctx, job) }},
		{"purge placeholder", func(ctx context.Context) error { return n.PurgeJob(ctx, "steward", "x") }},
		{"list nodes", func(ctx context.Context) error { _, _, err := n.ListNodes(ctx, true); return err }},
		{"list jobs", func(ctx context.Context) error { _, _, err := n.ListJobs(ctx, false); return err }},
		{"read job", func(ctx context.Context) error { _, err := n.ReadJob(ctx, "ml", "train", true); return err }},
		{"list allocations", func(ctx context.Context) error { _, _, err := n.ListAllocs(ctx, true); return err }},
		{"list blocked evaluations", func(ctx context.Context) error { _, _, err := n.ListBlockedEvals(ctx, true); return err }},
		{"job summary", func(ctx context.Context) error { _, err := n.JobSummary(ctx, "ml", "train", true); return err }},
		{"node stats", func(ctx context.Context) error { _, err := n.NodeStats(ctx, "n1"); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- tc.call(context.Background()) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
					t.Fatalf("the call to a server that never answers ended with %v, want its deadline", err)
				}
				if took := time.Since(start); took > 20*timeout {
					t.Errorf("the call took %s, deadline %s", took, timeout)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the call still hangs after 5s (deadline %s)", timeout)
			}
		})
	}
}
