package controller

import (
	"context"
	"fmt"
	"testing"
)

// TestPrefetchedStates: a follower reads the job states while it waits
// out a dead leader's lease; the term's load lists them again under the
// lease and reads again exactly those whose index moved since (written,
// deleted, new), taking the rest as read. What it loads is what a load
// without the read ahead loads.
func TestPrefetchedStates(t *testing.T) {
	ctx := context.Background()
	put := func(t *testing.T, f *fakeNomad, id, reason string) {
		t.Helper()
		st := &JobState{Namespace: "ml", ID: id, Status: StatusHeld, Reason: reason, Updated: t0}
		items, err := st.encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.PutVar(ctx, "steward", statePath(st.key()), items, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		// after runs between the read ahead and the load (the dead
		// leader's writes landing late, or nothing).
		after     func(t *testing.T, f *fakeNomad)
		prefetch  bool
		wantReads int
		want      map[string]string // job ID: reason
	}{
		{name: "no read ahead: every state read", wantReads: 5,
			want: map[string]string{"j0": "r0", "j1": "r1", "j2": "r2", "j3": "r3", "j4": "r4"}},
		{name: "nothing written since: none read again", prefetch: true, wantReads: 0,
			want: map[string]string{"j0": "r0", "j1": "r1", "j2": "r2", "j3": "r3", "j4": "r4"}},
		{name: "written, new and deleted since: only the written and the new read again", prefetch: true, wantReads: 2,
			after: func(t *testing.T, f *fakeNomad) {
				put(t, f, "j1", "rewritten")
				put(t, f, "j5", "new")
				if err := f.DeleteVar(ctx, "steward", statePath(jobKey{Namespace: "ml", ID: "j3"}), 0); err != nil {
					t.Fatal(err)
				}
			},
			want: map[string]string{"j0": "r0", "j1": "rewritten", "j2": "r2", "j4": "r4", "j5": "new"}},
		{name: "deleted and written again since: read again (a new index)", prefetch: true, wantReads: 1,
			after: func(t *testing.T, f *fakeNomad) {
				if err := f.DeleteVar(ctx, "steward", statePath(jobKey{Namespace: "ml", ID: "j2"}), 0); err != nil {
					t.Fatal(err)
				}
				put(t, f, "j2", "again")
			},
			want: map[string]string{"j0": "r0", "j1": "r1", "j2": "again", "j3": "r3", "j4": "r4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			for i := range 5 {
				put(t, f, fmt.Sprintf("j%d", i), fmt.Sprintf("r%d", i))
			}
			if tc.prefetch {
				if err := c.prefetchStates(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if tc.after != nil {
				tc.after(t, f)
			}
			before := f.gets["steward"]
			if err := c.loadStates(ctx); err != nil {
				t.Fatal(err)
			}
			if got := f.gets["steward"] - before; got != tc.wantReads {
				t.Errorf("the load read %d states, want %d", got, tc.wantReads)
			}
			got := map[string]string{}
			for k, st := range c.states() {
				got[k.ID] = st.Reason
				if _, idx, _ := f.GetVar(ctx, "steward", statePath(k)); c.index[k] != idx {
					t.Errorf("%s: index %d loaded, Nomad's %d (check-and-set would fail)", k.ID, c.index[k], idx)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("loaded %v, want %v", got, tc.want)
			}
			// Used once: a later load reads every state.
			before = f.gets["steward"]
			if err := c.loadStates(ctx); err != nil {
				t.Fatal(err)
			}
			if n, all := f.gets["steward"]-before, len(tc.want); n != all {
				t.Errorf("a second load read %d states, want all %d", n, all)
			}
		})
	}
}
