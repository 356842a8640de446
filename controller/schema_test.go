package controller

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A state as the controller before schema versions wrote it: no "schema"
// item.
const unversionedState = `{"namespace":"ml","id":"train","held":{"work":{"count":1,"original":2,"since":"2026-11-22T11:00:00Z","rule":"priority","index":7}},` +
	`"preemptions":["2026-11-22T11:00:00Z"],"preempted_total":3,"resumes":2,"status":"preempted","rule":"priority","reason":"for ml/nb","updated":"2026-11-22T11:00:00Z"}`

// TestStateSchemaOnLoad (issue 34, item 6): a state without a schema
// (written before versions were kept) reads as version 1, whole; a state
// of a newer schema, or one that names no version, is not read: the load
// fails with errNewerState, nothing is kept in memory (the next round
// reads everything again), the refusal is counted, and nothing in Nomad is
// written or deleted.
func TestStateSchemaOnLoad(t *testing.T) {
	tests := []struct {
		name    string
		schemas []string // the schema item of each state ("-": none)
		refused bool
	}{
		{"no schema: read as version 1", []string{"-"}, false},
		{"schema 1", []string{"1"}, false},
		{"a newer schema beside a version-1 state: refused", []string{"-", "2"}, true},
		{"a schema that is no version: refused", []string{"two"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			ids := []string{"train", "other"}
			for i, schema := range tt.schemas {
				items := map[string]string{"state": strings.Replace(unversionedState, `"id":"train"`, `"id":"`+ids[i]+`"`, 1)}
				if schema != "-" {
					items[schemaItem] = schema
				}
				f.vars["steward:"+statePrefix+"ml/"+ids[i]] = items
			}
			before := maps.Clone(f.vars)
			err := c.loadStates(context.Background())
			if got := errors.Is(err, errNewerState); got != tt.refused {
				t.Fatalf("load: %v, want refused %v", err, tt.refused)
			}
			refusals := testutil.ToFloat64(c.metrics.schemaRefusals.WithLabelValues("state"))
			if tt.refused {
				if len(c.states()) != 0 || !c.reload || refusals != 1 {
					t.Fatalf("refused, yet %d states kept (reload %v), %v refusals counted", len(c.states()), c.reload, refusals)
				}
				if !strings.Contains(err.Error(), "refusing to lead") || !strings.Contains(err.Error(), "upgrade this controller") {
					t.Fatalf("error %q does not say what to do", err)
				}
			} else {
				st := c.states()[jobKey{"ml", "train"}]
				if st == nil || st.Held["work"].Count != 1 || st.PreemptedTotal != 3 || st.Resumes != 2 || st.Reason != "for ml/nb" || refusals != 0 {
					t.Fatalf("state read %+v, want it whole", st)
				}
			}
			if calls := append(f.callsMatching("put"), f.callsMatching("delete")...); len(calls) > 0 {
				t.Fatalf("the load wrote: %q", calls)
			}
			if !maps.EqualFunc(f.vars, before, maps.Equal) {
				t.Fatalf("the variables changed")
			}
		})
	}
}

// TestStateWritesSchema: a state saved now says its schema, and reads
// back; so does a job's record.
func TestStateWritesSchema(t *testing.T) {
	st := &JobState{Namespace: "ml", ID: "train", Paused: true, Status: StatusPaused}
	items, err := st.encode()
	if err != nil {
		t.Fatal(err)
	}
	if items[schemaItem] != "1" {
		t.Fatalf("state items %v: no schema 1", items)
	}
	if back, err := decodeState(items); err != nil || !back.Paused {
		t.Fatalf("read back: %+v, %v", back, err)
	}
	rec := recordItems(testPolicy(t), st, job("ml", "train", "training", 40, 1, 1), time.Time{}, t0)
	if rec[recordSchemaItem] != "1" {
		t.Fatalf("record %v: no steward_schema 1", rec)
	}
}

// TestNewerRecordLeftAlone: a job's record written by a newer controller
// is not overwritten (its keys could mean what this one does not know);
// the refusal is counted, and it is that record's alone.
func TestNewerRecordLeftAlone(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f)
	f.vars["ml:nomad/jobs/train"] = map[string]string{recordSchemaItem: "2", "steward_reason": "from the future", "owner": "kept"}
	err := c.pub.mergeRecord(context.Background(), jobKey{"ml", "train"}, "nomad/jobs/train", map[string]string{recordSchemaItem: "1", "steward_reason": "now"})
	if !errors.Is(err, errNewerState) {
		t.Fatalf("merge: %v, want a refusal", err)
	}
	if got := f.vars["ml:nomad/jobs/train"]["steward_reason"]; got != "from the future" || len(f.callsMatching("put")) > 0 {
		t.Fatalf("the newer record was overwritten: %q", got)
	}
	if n := testutil.ToFloat64(c.metrics.schemaRefusals.WithLabelValues("record")); n != 1 {
		t.Fatalf("%v record refusals counted, want 1", n)
	}
	// A version-1 record (or one without a version) is Steward's to merge.
	f.vars["ml:nomad/jobs/train"][recordSchemaItem] = "1"
	if err := c.pub.mergeRecord(context.Background(), jobKey{"ml", "train"}, "nomad/jobs/train", map[string]string{recordSchemaItem: "1", "steward_reason": "now"}); err != nil {
		t.Fatal(err)
	}
	if got := f.vars["ml:nomad/jobs/train"]; got["steward_reason"] != "now" || got["owner"] != "kept" {
		t.Fatalf("record %v", got)
	}
}

// TestOlderControllerRefusesToLead: a controller that finds a state of a
// newer schema when it takes the lock (a downgrade, or a rolling upgrade
// gone backwards) acts on nothing: it writes nothing, reads no cluster,
// says why in its health, steps down, and leaves the lock alone for a TTL
// each time rather than take it back at once; the newer state is intact.
func TestOlderControllerRefusesToLead(t *testing.T) {
	f := newFakeNomad()
	newer := map[string]string{"state": unversionedState, schemaItem: "2"}
	f.vars["steward:"+statePrefix+"ml/train"] = maps.Clone(newer)
	lk := &fakeLock{ttl: 300 * time.Millisecond}
	old := electedController(t, "old", f, time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = old.election.contend(ctx, func() (leaderLock, error) { return fakeLockHandle{l: lk, id: "old"}, nil }, old.lead)
	}()
	time.Sleep(1100 * time.Millisecond)
	cancel()
	wg.Wait()

	took := len(lk.takers())
	if took == 0 || took > 4 {
		t.Fatalf("the old controller took the lock %d times in 1.1s, want it to leave it a TTL (300ms) after each refusal", took)
	}
	if h := old.Health(); h.Leader || !strings.Contains(h.LastError, "newer schema") {
		t.Fatalf("health %+v: want not leading, the refusal as its last error", h)
	}
	if calls := f.callsMatching(""); len(calls) > 0 {
		t.Fatalf("the old controller called Nomad: %q", calls)
	}
	if got := f.vars["steward:"+statePrefix+"ml/train"]; !maps.Equal(got, newer) {
		t.Fatalf("the newer state changed: %v", got)
	}
	if n := testutil.ToFloat64(old.metrics.schemaRefusals.WithLabelValues("state")); n < 1 {
		t.Fatalf("no refusal counted")
	}
}
