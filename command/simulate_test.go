package command

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/cli"
)

const simTrace = `job,submit,gpus,allocs,run_time,tenant,tier,idle_after
T1,0,8,2,7200,ml,training,never
I1,1800,8,1,3600,ml,interactive,never
`

func TestSimulate(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"policy.hcl": "tier \"interactive\" { priority = 60 }\ntier \"training\" { priority = 40 }\n",
		"trace.csv":  simTrace,
		"bad.csv":    "job,submit,gpus,run_time\na,0,x,10\n",
		"header.csv": "job,submit,gpus,run_time\n",
		"typo.csv":   "job,submit,gpus,run_time,tier\na,0,1,60,trainng\nb,0,0.5,60,training\n",
		"big.csv":    "job,submit,gpus,allocs,run_time\n" + "b,0,8,3,60\nc,0,8,4,60\n",
	})
	in := func(name string) string { return filepath.Join(dir, name) }
	out := filepath.Join(dir, "out")
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"table", []string{"-policy", in("policy.hcl"), "-trace", in("trace.csv"), "-nodes", "2", "-plan-interval", "0"}, 0,
			[]string{"Trace trace (steward): 2 GPU jobs on 2 nodes × 8 GPUs", "Workload derivation (seed 1",
				"fifo", "strict", "steward", "interactive delay p50/p95/p99 (min)", "90.0 / 90.0 / 90.0"}, nil},
		{"json and files", []string{"-policy", in("policy.hcl"), "-trace", in("trace.csv"), "-nodes", "2",
			"-format", "json", "-out", out}, 0, []string{`"policy": "steward"`, `"derivation"`}, []string{"results.csv", "trace-delay-cdf.png"}},
		{"csv, one policy", []string{"-policy", in("policy.hcl"), "-trace", in("trace.csv"), "-nodes", "2", "-policies", "strict", "-format", "csv"}, 0,
			[]string{"trace,policy,metric,value", "trace,strict,preemptions,1"}, nil},
		{"mixed nodes", []string{"-policy", in("policy.hcl"), "-trace", in("trace.csv"), "-nodes", "2x8,1x4", "-policies", "fifo"}, 0,
			[]string{"2 GPU jobs on 2 nodes × 8 GPUs + 1 node × 4 GPUs (20 GPUs)"}, nil},
		{"nodes list and gpus-per-node", []string{"-policy", in("policy.hcl"), "-trace", in("trace.csv"), "-nodes", "2x8",
			"-gpus-per-node", "8"}, 1, nil, []string{"-nodes 2x8 gives each node's GPUs: leave out -gpus-per-node"}},
		{"bad nodes", []string{"-policy", in("policy.hcl"), "-trace", in("trace.csv"), "-nodes", "4by8"}, 1, nil,
			[]string{`"4by8" is not COUNTxGPUS`}},
		{"bad gpus per node", []string{"-policy", in("policy.hcl"), "-trace", in("trace.csv"), "-gpus-per-node", "0"}, 1, nil,
			[]string{"-gpus-per-node between 1 and 127"}},
		{"window", []string{"-policy", in("policy.hcl"), "-trace", in("trace.csv"), "-nodes", "2", "-from", "30m", "-policies", "fifo"}, 0,
			[]string{"1 GPU jobs on 2 nodes × 8 GPUs; jobs submitted 30m to the end of the trace (re-based to start at 0; 1 outside left out)"}, nil},
		{"window backwards", []string{"-policy", in("policy.hcl"), "-trace", in("trace.csv"), "-from", "2h", "-to", "1h"}, 1, nil,
			[]string{"-from/-to: window [2h, 1h): the end must come after the start."}},
		{"header only", []string{"-policy", in("policy.hcl"), "-trace", in("header.csv")}, 2, nil,
			[]string{"Warning: trace header: nothing to simulate: 0 job rows"}},
		{"every job too large, another trace fine", []string{"-policy", in("policy.hcl"), "-trace", in("big.csv"),
			"-trace", in("trace.csv"), "-nodes", "2", "-policies", "fifo"}, 2,
			[]string{"Trace trace (steward): 2 GPU jobs"},
			[]string{"Warning: trace big: nothing to simulate: all 2 jobs are larger than the cluster (16 GPUs)"}},
		{"every job outside the window", []string{"-policy", in("policy.hcl"), "-trace", in("trace.csv"), "-from", "1h"}, 2, nil,
			[]string{"nothing to simulate: all 2 jobs were submitted outside the window (1h to the end)"}},
		{"unknown tier and a fractional GPU", []string{"-policy", in("policy.hcl"), "-trace", in("typo.csv"), "-nodes", "1",
			"-format", "json"}, 0, []string{`"unknown_tier_jobs": {`, `"trainng": 1`, `"fractional_gpu_jobs": 1`}, nil},
		{"malformed trace", []string{"-policy", in("policy.hcl"), "-trace", in("bad.csv")}, 1, nil,
			[]string{`bad.csv: line 2, column 3 (gpus): not a whole number: "x"`}},
		{"unknown shared trace", []string{"-policy", in("policy.hcl"), "-trace", "alibaba", "-traces-dir", dir}, 1, nil,
			[]string{`trace "alibaba": no such file`}},
		{"no trace", []string{"-policy", in("policy.hcl")}, 1, nil, []string{"No trace given"}},
		{"no policy", []string{"-trace", in("trace.csv")}, 1, nil, []string{"No policy given"}},
		{"bad policy", []string{"-policy", in("trace.csv"), "-trace", in("trace.csv")}, 1, nil, []string{"trace.csv:1"}},
		{"bad format", []string{"-policy", in("policy.hcl"), "-trace", in("trace.csv"), "-format", "xml"}, 1, nil, []string{`Unknown -format "xml"`}},
		{"bad policies", []string{"-policy", in("policy.hcl"), "-trace", in("trace.csv"), "-policies", "fifo,lifo"}, 1, nil, []string{`unknown policy "lifo"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ui := cli.NewMockUi()
			code := (&SimulateCommand{UI: ui}).Run(tc.args)
			stdout, stderr := ui.OutputWriter.String(), ui.ErrorWriter.String()
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr, s) && !strings.Contains(stdout, s) {
					t.Errorf("output lacks %q:\nstdout:\n%s\nstderr:\n%s", s, stdout, stderr)
				}
			}
		})
	}
	var reports []map[string]any
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &reports); err != nil || len(reports) != 1 {
		t.Fatalf("results.json: %v, %d reports", err, len(reports))
	}
	for _, f := range []string{"results.csv", "trace-delay-cdf.png", "trace-utilisation.png"} {
		if info, err := os.Stat(filepath.Join(out, f)); err != nil || info.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

// The shared traces are found by name from the repository root.
func TestSimulateSharedTraceByName(t *testing.T) {
	ui := cli.NewMockUi()
	code := (&SimulateCommand{UI: ui}).Run([]string{"-policy", filepath.Join("..", "example.hcl"), "-scale", "100",
		"-trace", "helios", "-traces-dir", filepath.Join("..", "..", "shared", "traces"), "-limit", "300", "-format", "csv"})
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, ui.ErrorWriter.String())
	}
	if out := ui.OutputWriter.String(); !strings.Contains(out, "helios_data_training,steward,jobs,300") {
		t.Errorf("no figures for 300 Helios jobs:\n%.400s", out)
	}
}
