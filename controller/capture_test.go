package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestCaptureReplay (issue 32, item 3): what a round saw, written and read
// back, plans again to the same plan byte for byte: the engine is pure and
// the capture holds all it reads. The policy's notify blocks, whose
// headers may hold credentials, are not in it. A file from a newer build,
// or not a capture, is refused with a clear error.
func TestCaptureReplay(t *testing.T) {
	planJSON := func(p *engine.Plan) string {
		b, err := json.Marshal(struct {
			A []engine.Action
			W []engine.Waiting
			T []engine.TenantUsage
		}{p.Actions, p.Waiting, p.Tenants})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	clusters := []struct {
		name  string
		setup func(f *fakeNomad)
		extra string
	}{
		{name: "a preemption with a checkpoint grace", setup: preemptionCluster},
		{name: "two nodes and a tenant over its limit with a notify header", setup: func(f *fakeNomad) {
			preemptionCluster(f)
			cl := f.cl()
			cl.nodes = append(cl.nodes, apiNode("n2", 2))
			x := apiJob("lab", "x", "training", 40, 1, 2)
			cl.jobs["lab/x"] = x
			cl.allocs = append(cl.allocs, apiAlloc("a-x", x, "n2", []string{"n2-gpu0", "n2-gpu1"}, t0.Add(-time.Hour)))
		}, extra: `tenant "lab" {
  limit = 1
}
notify "ops" {
  url     = "https://hooks.example.com/steward"
  headers_from_env = { Authorization = "OPS_S3CRET_AUTH" }
}
`},
	}
	for _, tc := range clusters {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			tc.setup(f)
			r := newRoundRunner(t, f)
			if tc.extra != "" {
				p := sysPolicy(t, tc.extra)
				r.c.pol, r.c.eng = p, engine.New(p)
			}
			cp, plan, err := r.c.CaptureOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(plan.Actions) == 0 {
				t.Fatalf("the plan has no action to replay: %s", planJSON(plan))
			}
			var buf bytes.Buffer
			if err := cp.Write(&buf); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(buf.String(), "S3CRET") || strings.Contains(buf.String(), "hooks.example.com") {
				t.Errorf("the capture holds the notify block's URL or header")
			}
			back, err := ReadCapture(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := planJSON(back.Replay()), planJSON(plan); got != want {
				t.Errorf("replayed plan differs:\n got %s\nwant %s", got, want)
			}
		})
	}
	for _, bad := range []struct{ name, file, want string }{
		{"a newer format", `{"version": 99, "at": "2026-11-27T10:00:00Z", "policy": {}, "snapshot": {}}`, "format version 99 is newer than this build's (1)"},
		{"not a capture", `{"version": 1}`, "not a capture"},
		{"an unknown field", `{"version": 1, "extra": true}`, `unknown field "extra"`},
	} {
		t.Run(bad.name, func(t *testing.T) {
			if _, err := ReadCapture(strings.NewReader(bad.file)); err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("ReadCapture: %v, want an error with %q", err, bad.want)
			}
		})
	}
}
