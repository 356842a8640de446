package controller

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// lockedLog is a log output that rounds and the goroutines they start
// (the queue forecast) may write while a test reads it.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// lines are the logged lines that contain msg.
func (l *lockedLog) lines(msg string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, msg) {
			out = append(out, line)
		}
	}
	return out
}

// The first rounds of a lead term log what each phase took, one line a
// round, so that a slow failover says where its time went; later rounds,
// and rounds outside a term, log none.
func TestRoundPhasesLogged(t *testing.T) {
	f := newFakeNomad()
	preemptionCluster(f)
	var out lockedLog
	r := newRoundRunner(t, f, withLogger(hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})))
	if _, err := r.round(0); err != nil {
		t.Fatal(err)
	}
	if got := out.lines("round phases"); len(got) != 0 {
		t.Fatalf("a round outside a lead term logged its phases: %q", got)
	}
	cases := []struct {
		name  string
		term  bool // a lead term starts before the rounds
		steps []time.Duration
		want  []string // each line's round field, in order
	}{
		{name: "a term's first three rounds", term: true,
			steps: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second},
			want:  []string{"round=1", "round=2", "round=3"}},
		{name: "a later term's first round again", term: true, steps: []time.Duration{6 * time.Second}, want: []string{"round=1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out.mu.Lock()
			out.buf.Reset()
			out.mu.Unlock()
			if tc.term {
				r.c.election.phases.termStarted(time.Now()) // as lead does
			}
			for _, at := range tc.steps {
				if _, err := r.round(at); err != nil {
					t.Fatal(err)
				}
			}
			got := out.lines("round phases")
			if len(got) != len(tc.want) {
				t.Fatalf("%d lines, want %d: %q", len(got), len(tc.want), got)
			}
			for i, line := range got {
				for _, field := range []string{tc.want[i], "observe=", "recover=", "plan=", "act=", "publish=", "observe_full_read=", "observe_summary_reads=", "observe_waited=", "total=", "since_lead=", "failed=0"} {
					if !strings.Contains(line, field) {
						t.Errorf("line %d lacks %s: %s", i, field, line)
					}
				}
			}
		})
	}
}

// TestSlowRoundPhasesLogged: past a term's first rounds, a round that took
// slowRound or more, or failed, logs its phases too, with how long the
// loop idled before it (issue 33: decisions waited 22-31 s at 250 nodes
// while the log showed no round for about 10 s; the rounds were running,
// each held for seconds by its Nomad writes, and nothing said so).
func TestSlowRoundPhasesLogged(t *testing.T) {
	cases := []struct {
		name string
		took time.Duration // the round's length
		err  error
		want bool
	}{
		{name: "a fast later round: not logged", took: 10 * time.Millisecond},
		{name: "a later round just under the bound: not logged", took: slowRound - 20*time.Millisecond},
		{name: "a slow later round: logged", took: slowRound + 50*time.Millisecond, want: true},
		{name: "a failed later round: logged", took: time.Millisecond, err: errInjected, want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out lockedLog
			log := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})
			var pc phaseClock
			pc.termStarted(time.Now())
			for range phaseRounds {
				pc.start().log(log, nil)
			}
			first := len(out.lines("round phases"))
			tm := pc.start()
			tm.start = tm.start.Add(-tc.took) // as if the round had begun earlier
			tm.done("act")
			tm.log(log, tc.err)
			got := out.lines("round phases")[first:]
			if !tc.want {
				if len(got) != 0 {
					t.Fatalf("logged: %q", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d lines, want 1: %q", len(got), got)
			}
			for _, field := range []string{"round=4 ", "act=", "total=", "idle_before="} {
				if !strings.Contains(got[0], field) {
					t.Errorf("lacks %s: %s", field, got[0])
				}
			}
		})
	}
}
