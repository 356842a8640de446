package scale

import "testing"

// TestLeadWatch: the harness measures whoever leads the window. One
// named case per story: polls of both copies (who said they lead, how
// many did not answer), in the fill or the window, and what the watch
// measures after them.
func TestLeadWatch(t *testing.T) {
	type poll struct {
		leaders    []string
		unanswered int
		window     bool
	}
	cases := []struct {
		name               string
		polls              []poll
		measured           string
		changes, restarts  int
		gaps               int
		lost, lastRestarts bool // lastRestarts: the last poll starts the window again
	}{
		{name: "a leads throughout", polls: []poll{{leaders: []string{"a"}}, {leaders: []string{"a"}, window: true}, {leaders: []string{"a"}, window: true}},
			measured: "a"},
		{name: "the lease passes to b in the fill: b is measured, no restart",
			polls:    []poll{{leaders: []string{"a"}}, {leaders: nil}, {leaders: []string{"b"}}, {leaders: []string{"b"}, window: true}},
			measured: "b", changes: 1, gaps: 1},
		{name: "the lease passes to b in the window: the window starts again on b",
			polls:    []poll{{leaders: []string{"a"}, window: true}, {leaders: []string{"a", "b"}, window: true}, {leaders: []string{"b"}, window: true}},
			measured: "b", changes: 1, restarts: 1, lastRestarts: true},
		{name: "a slow leader that does not answer is no change",
			polls:    []poll{{leaders: []string{"a"}, window: true}, {leaders: nil, unanswered: 1, window: true}, {leaders: []string{"a"}, window: true}},
			measured: "a"},
		{name: "a lease lost and taken back by a is a change, not a restart",
			polls:    []poll{{leaders: []string{"a"}, window: true}, {leaders: nil, window: true}, {leaders: []string{"a"}, window: true}},
			measured: "a", changes: 1, gaps: 1},
		{name: "the lease passes back and forth: two restarts, then the window goes on and says the lead was lost",
			polls: []poll{{leaders: []string{"b"}, window: true}, {leaders: []string{"a"}, window: true},
				{leaders: []string{"b"}, window: true}},
			measured: "a", changes: 3, restarts: 2, lost: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newLeadWatch("a")
			restarted := false
			for _, p := range tc.polls {
				restarted = false
				if now := w.poll(p.leaders, p.unanswered); now != "" {
					restarted = w.follow(now, p.window) && p.window
				}
			}
			if w.measured != tc.measured || w.changes != tc.changes || w.restarts != tc.restarts || w.gaps != tc.gaps ||
				w.lost != tc.lost || restarted != tc.lastRestarts {
				t.Fatalf("measured %s, %d changes, %d restarts, %d gaps, lost %v, last poll restarts %v; want %s, %d, %d, %d, %v, %v",
					w.measured, w.changes, w.restarts, w.gaps, w.lost, restarted, tc.measured, tc.changes, tc.restarts, tc.gaps, tc.lost, tc.lastRestarts)
			}
		})
	}
}
