package controller

import (
	"testing"
	"time"
)

// TestQueueRecordDue: when a waiting job's record is rewritten for its
// queue figures alone (stabiliseQueue): what moved, and how long since the
// record last showed them.
func TestQueueRecordDue(t *testing.T) {
	p50 := t0.Add(time.Hour)
	shown := func(pos, of int) shownQueue {
		return shownQueue{position: "x", pos: pos, of: of, tenantPos: pos, tenantOf: of, known: true, p50: p50, at: t0}
	}
	moved := func(sh shownQueue, pos, of int) shownQueue {
		sh.position, sh.pos, sh.of, sh.tenantPos, sh.tenantOf = "y", pos, of, pos, of
		return sh
	}
	cases := []struct {
		name      string
		old, now  shownQueue
		after     time.Duration
		rewritten bool
	}{
		{"the first forecast: at once", func() shownQueue { s := shown(3, 5); s.known = false; return s }(), shown(3, 5), time.Second, true},
		{"place 3 becomes 2: not within 5 s of the last write", shown(3, 5), moved(shown(3, 5), 2, 5), 3 * time.Second, false},
		{"place 3 becomes 2: after 5 s", shown(3, 5), moved(shown(3, 5), 2, 5), 5 * time.Second, true},
		{"a queue of 3 becomes 1", shown(1, 3), moved(shown(1, 3), 1, 1), 5 * time.Second, true},
		{"one job joins a queue of 20: waits for the minute", shown(2, 20), moved(shown(2, 20), 2, 21), 30 * time.Second, false},
		{"one job joins a queue of 20: written when the minute is up", shown(2, 20), moved(shown(2, 20), 2, 21), time.Minute, true},
		{"place 15 becomes 14: waits for the minute", shown(15, 30), moved(shown(15, 30), 14, 30), 30 * time.Second, false},
		{"place 60 becomes 40, behind the first 32: waits for the minute", shown(60, 80), moved(shown(60, 80), 40, 80), 30 * time.Second, false},
		{"the forecast moves by 20 minutes: waits for the minute", shown(3, 5), func() shownQueue { s := shown(3, 5); s.p50 = p50.Add(20 * time.Minute); return s }(), 30 * time.Second, false},
		{"the forecast moves by 20 minutes: written when the minute is up", shown(3, 5), func() shownQueue { s := shown(3, 5); s.p50 = p50.Add(20 * time.Minute); return s }(), time.Minute, true},
		{"the forecast moves by 2 minutes: never", shown(3, 5), func() shownQueue { s := shown(3, 5); s.p50 = p50.Add(2 * time.Minute); return s }(), time.Hour, false},
		{"only time passes: never", shown(3, 5), shown(3, 5), 24 * time.Hour, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.old.due(&tc.now, t0.Add(tc.after)); got != tc.rewritten {
				t.Errorf("due after %s = %v, want %v", tc.after, got, tc.rewritten)
			}
		})
	}
}
