package sim

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A trace that leaves no job says why, as a NothingToSimulate error.
func TestNothingToSimulate(t *testing.T) {
	const steward = "job,submit,gpus,allocs,run_time\n"
	const genParallel = "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status\n"
	tests := []struct {
		name   string
		csv    string
		window Window
		want   string // "" when something is left
	}{
		{"header only", steward, Window{}, "trace t: nothing to simulate: 0 job rows"},
		{"comments only", "# exported\n" + genParallel + "# nothing yet\n", Window{}, "trace t: nothing to simulate: 0 job rows"},
		{"all too large", steward + "a,0,8,2,60\nb,0,16,1,60\n", Window{},
			"trace t: nothing to simulate: all 2 jobs are larger than the cluster (8 GPUs)"},
		{"all CPU-only", genParallel + "0,1,0,4,1,0,10,0,Pass\n1,1,0,4,1,5,10,0,Pass\n", Window{},
			"trace t: nothing to simulate: all 2 jobs are CPU-only (gpu_num 0)"},
		{"all outside the window", steward + "a,0,1,1,60\nb,10,1,1,60\n", Window{From: time.Hour},
			"trace t: nothing to simulate: all 2 jobs were submitted outside the window (1h to the end)"},
		{"mixed causes", genParallel + "0,1,0,4,1,0,10,0,Pass\n1,1,16,4,1,5,10,0,Pass\n2,1,1,4,1,7200,10,0,Pass\n",
			Window{To: time.Hour},
			"trace t: nothing to simulate: none of 3 jobs is left: 1 CPU-only (gpu_num 0), 1 submitted outside the window (0s to 1h), 1 larger than the cluster (8 GPUs)"},
		{"one left", steward + "a,0,1,1,60\nb,0,16,1,60\n", Window{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := mustTraceRaw(t, tc.csv)
			_, err := Compare(tr, Options{Config: Config{Policy: mustPolicy(t, tinyPolicy), Nodes: 1, GPUsPerNode: 8},
				Window: tc.window, Policies: []PolicyKind{FIFO}})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var nothing *NothingToSimulate
			if !errors.As(err, &nothing) || err.Error() != tc.want {
				t.Fatalf("error %v (%T)\nwant %s", err, err, tc.want)
			}
		})
	}
}

// mustTraceRaw reads a trace byte for byte (mustTrace trims it first).
func mustTraceRaw(t *testing.T, csv string) *Trace {
	t.Helper()
	tr, err := ReadTrace(strings.NewReader(csv), "t")
	if err != nil {
		t.Fatalf("trace: %v", err)
	}
	return tr
}
