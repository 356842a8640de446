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
