package driver

import (
	"testing"
	"time"
)

func TestActivityMonitor(t *testing.T) {
	cfg := Config{IdleThreshold: 10, BusyThreshold: 20, IdleAfter: 3 * time.Minute, BusyAfter: time.Minute}
	type sample struct {
		at   float64 // minutes after start
		util float64
		want transition
	}
	for _, tc := range []struct {
		name    string
		samples []sample
	}{
		{"busy all along: no event", []sample{{0, 80, noTransition}, {5, 90, noTransition}, {10, 15, noTransition}}},
		{"idle after idle_after, once", []sample{{0, 5, noTransition}, {2, 3, noTransition}, {3, 2, becameIdle}, {4, 0, noTransition}, {10, 0, noTransition}}},
		{"a busy sample restarts the idle timer", []sample{{0, 5, noTransition}, {2, 50, noTransition}, {3, 5, noTransition}, {5, 5, noTransition}, {6, 5, becameIdle}}},
		{"between the thresholds restarts the idle timer too", []sample{{0, 5, noTransition}, {2, 15, noTransition}, {3, 5, noTransition}, {6, 5, becameIdle}}},
		{"busy again after busy_after over the busy threshold", []sample{{0, 0, noTransition}, {3, 0, becameIdle}, {4, 50, noTransition}, {5, 50, becameBusy}, {6, 50, noTransition}}},
		{"hysteresis: between the thresholds stays idle", []sample{{0, 0, noTransition}, {3, 0, becameIdle}, {4, 15, noTransition}, {10, 19, noTransition}}},
		{"a dip resets busy_after", []sample{{0, 0, noTransition}, {3, 0, becameIdle}, {4, 50, noTransition}, {4.5, 15, noTransition}, {5, 50, noTransition}, {6, 50, becameBusy}}},
		{"idle again after busy", []sample{{0, 0, noTransition}, {3, 0, becameIdle}, {4, 50, noTransition}, {5, 50, becameBusy}, {6, 0, noTransition}, {9, 0, becameIdle}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newActivityMonitor(cfg)
			start := time.Unix(1_700_000_000, 0)
			for i, s := range tc.samples {
				at := start.Add(time.Duration(s.at * float64(time.Minute)))
				if got := m.observe(at, s.util); got != s.want {
					t.Fatalf("sample %d (%vm, %v%%): transition %d, want %d", i, s.at, s.util, got, s.want)
				}
			}
		})
	}
}
