package sim

import (
	"strings"
	"testing"
)

// A fraction of a GPU below 1 counts as one GPU, in both formats; other
// non-whole counts stay errors.
func TestFractionalGPUs(t *testing.T) {
	const steward = "job,submit,gpus,run_time\n"
	const genParallel = "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status\n"
	tests := []struct {
		name    string
		csv     string
		gpus    int
		allocs  int
		frac    bool
		dropped int    // CPU-only rows
		err     string // else
	}{
		{"half", steward + "a,0,0.5,10\n", 1, 1, true, 0, ""},
		{"quarter", steward + "a,0,.25,10\n", 1, 1, true, 0, ""},
		{"whole with a decimal point", steward + "a,0,2.0,10\n", 2, 1, false, 0, ""},
		{"whole", steward + "a,0,3,10\n", 3, 1, false, 0, ""},
		{"one and a half", steward + "a,0,1.5,10\n", 0, 0, false, 0,
			"line 2, column 3 (gpus): 1.5 is not a whole number of GPUs (only a fraction below 1 is taken, as 1 GPU)"},
		{"negative fraction", steward + "a,0,-0.5,10\n", 0, 0, false, 0, "-0.5 is not a whole number of GPUs"},
		{"zero as a decimal", steward + "a,0,0.0,10\n", 0, 0, false, 0, "0.0 is out of range [1, 65536]"},
		{"not a number", steward + "a,0,half,10\n", 0, 0, false, 0, `not a whole number: "half"`},
		{"nan", steward + "a,0,NaN,10\n", 0, 0, false, 0, `not a whole number: "NaN"`},
		{"gen-parallel half", genParallel + "0,1,0.5,1,1,0,100,0,Pass\n", 1, 1, true, 0, ""},
		{"gen-parallel half over two nodes", genParallel + "0,1,0.5,1,2,0,100,0,Pass\n", 1, 1, true, 0, ""},
		{"gen-parallel zero stays CPU-only", genParallel + "0,1,0.0,1,1,0,100,0,Pass\n", 0, 0, false, 1, ""},
		{"gen-parallel 2.5", genParallel + "0,1,2.5,1,1,0,100,0,Pass\n", 0, 0, false, 0,
			"line 2, column 3 (gpu_num): 2.5 is not a whole number of GPUs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ReadTrace(strings.NewReader(tc.csv), "t")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tr.Dropped != tc.dropped {
				t.Fatalf("%d rows dropped, want %d", tr.Dropped, tc.dropped)
			}
			if tc.dropped > 0 {
				return
			}
			j := tr.Jobs[0]
			if j.GPUs != tc.gpus || j.Allocs != tc.allocs || j.FractionalGPU != tc.frac {
				t.Errorf("%d × %d GPUs, fractional %v; want %d × %d, %v", j.Allocs, j.GPUs, j.FractionalGPU,
					tc.allocs, tc.gpus, tc.frac)
			}
		})
	}
}

// The report says how many jobs were rounded up: in the rule and in
// results.json.
func TestFractionalGPUsReported(t *testing.T) {
	tr := mustTrace(t, `
job,submit,gpus,run_time
a,0,0.5,60
b,0,0.25,60
c,0,1,60`)
	rep, err := Compare(tr, Options{Config: Config{Policy: mustPolicy(t, tinyPolicy), Nodes: 1, GPUsPerNode: 8},
		Policies: []PolicyKind{FIFO}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FractionalGPUJobs != 2 {
		t.Errorf("fractional_gpu_jobs %d, want 2", rep.FractionalGPUJobs)
	}
	if !strings.Contains(rep.Derivation, "2 jobs asked for a fraction of a GPU; each was counted as 1 whole GPU") {
		t.Errorf("the rule does not say so:\n%s", rep.Derivation)
	}
	var js strings.Builder
	if err := WriteJSON(&js, []*Report{rep}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"fractional_gpu_jobs": 2`) {
		t.Errorf("results.json lacks fractional_gpu_jobs")
	}
}
