package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRefusedMeta: meta values Steward cannot honour are refused where they
// are read: the engine gets the policy's value, the job's record and
// `steward status` say what was wrong and what is used instead, and the
// refusal is logged and counted once per job version.
func TestRefusedMeta(t *testing.T) {
	cases := []struct {
		name       string
		meta       map[string]string
		wantTier   string // steward_tier in the record
		wantWarn   string // steward_warning ("" for none)
		wantGang   bool
		wantSignal string // engine.Job.Checkpoint
		wantKey    string // metric label counted
	}{
		{name: "valid meta is taken as written", meta: map[string]string{"steward.tier": "interactive", "steward.gang": "true",
			"steward.checkpoint_signal": "usr2"}, wantTier: "interactive", wantGang: true, wantSignal: "SIGUSR2"},
		{name: "tier typo runs as the default tier", meta: map[string]string{"steward.tier": "traning"}, wantTier: "training",
			wantWarn: `tier "traning" is not defined (did you mean training?): runs as training`, wantSignal: "SIGUSR1",
			wantKey: "steward.tier"},
		{name: "gang maybe is no gang", meta: map[string]string{"steward.tier": "training", "steward.gang": "maybe"},
			wantTier: "training", wantWarn: `steward.gang "maybe" is not true or false: not a gang`, wantSignal: "SIGUSR1",
			wantKey: "steward.gang"},
		{name: "unknown signal keeps the policy's", meta: map[string]string{"steward.tier": "training", "steward.checkpoint_signal": "SIGFOO"},
			wantTier: "training", wantWarn: `steward.checkpoint_signal "SIGFOO" is not a signal name`, wantSignal: "SIGUSR1",
			wantKey: "steward.checkpoint_signal"},
		{name: "none opts out of the signal", meta: map[string]string{"steward.tier": "training", "steward.checkpoint_signal": "none"},
			wantTier: "training", wantSignal: "none"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			j := job("ml", "train", "", 40, 1, 1)
			j.Meta = tc.meta
			r := roundWith([]*ObservedJob{j}, nil)

			snap := buildSnapshot(c.pol, r.obs, c.states(), nil)
			for _, d := range snap.Waiting {
				if d.Job.Gang != tc.wantGang || d.Job.Checkpoint != tc.wantSignal {
					t.Errorf("engine job: gang %v signal %q, want %v %q", d.Job.Gang, d.Job.Checkpoint, tc.wantGang, tc.wantSignal)
				}
			}

			c.checkJobMeta(c.pol, r.obs)
			c.checkJobMeta(c.pol, r.obs) // same version: counted once
			c.pub.writeRecords(context.Background(), r, c.pol)
			items, _, _ := f.GetVar(context.Background(), "ml", "nomad/jobs/train")
			if tc.wantWarn == "" {
				if items != nil {
					t.Errorf("record written for a job with nothing to say: %v", items)
				}
				if n := testutil.CollectAndCount(c.metrics.metaRefused); n != 0 {
					t.Errorf("%d refusals counted", n)
				}
				return
			}
			if !strings.Contains(items["steward_warning"], tc.wantWarn) || items["steward_tier"] != tc.wantTier {
				t.Errorf("record %v, want tier %q and warning %q", items, tc.wantTier, tc.wantWarn)
			}
			if got := testutil.ToFloat64(c.metrics.metaRefused.WithLabelValues(tc.wantKey)); got != 1 {
				t.Errorf("refusals of %s counted %v times, want once per job version", tc.wantKey, got)
			}
			if w := c.warnings(); len(w) != 1 || w[0].Job != "ml/train" || !strings.Contains(w[0].Problem, tc.wantWarn) {
				t.Errorf("status warnings %+v", w)
			}

			// A new job version with the same mistake (Steward scaled it)
			// repeats nothing; a fixed job loses its warning.
			j.ModifyIndex++
			c.checkJobMeta(c.pol, r.obs)
			if got := testutil.ToFloat64(c.metrics.metaRefused.WithLabelValues(tc.wantKey)); got != 1 {
				t.Errorf("after a new version: counted %v, want 1", got)
			}
			j.Meta = map[string]string{"steward.tier": "training"}
			c.checkJobMeta(c.pol, r.obs)
			c.pub.writeRecords(context.Background(), r, c.pol)
			items, _, _ = f.GetVar(context.Background(), "ml", "nomad/jobs/train")
			if _, ok := items["steward_warning"]; ok || len(c.warnings()) != 0 {
				t.Errorf("fixed job keeps its warning: %v %v", items, c.warnings())
			}
		})
	}
}
