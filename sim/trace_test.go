package sim

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestReadTraceSteward(t *testing.T) {
	tr := mustTrace(t, `
# a comment line
job, submit, gpus, run_time, allocs, tenant, tier, idle_after, user
b,  60,  4, 3600,  ,   ml, training, never, ann
a,  0.5, 8, 90.25, 2,  ,   ,         600,   bob
c,  60,  1, 10,    1,  ,   ,         ,      `)
	if tr.Format != FormatSteward || len(tr.Jobs) != 3 {
		t.Fatalf("format %s, %d jobs; want steward, 3", tr.Format, len(tr.Jobs))
	}
	want := []Job{
		{ID: "a", Line: 4, User: "bob", Submit: 500 * time.Millisecond, GPUs: 8, Allocs: 2, RunTime: 90250 * time.Millisecond, IdleAfter: 600 * time.Second},
		{ID: "b", Line: 3, User: "ann", Submit: time.Minute, GPUs: 4, Allocs: 1, RunTime: time.Hour, Tenant: "ml", Tier: "training", IdleAfter: NeverIdle},
		{ID: "c", Line: 5, Submit: time.Minute, GPUs: 1, Allocs: 1, RunTime: 10 * time.Second, IdleAfter: IdleUnset},
	}
	for i, w := range want {
		if tr.Jobs[i] != w {
			t.Errorf("job %d:\n got  %+v\n want %+v", i, tr.Jobs[i], w)
		}
	}
}

func TestReadTraceGenParallel(t *testing.T) {
	tr := mustTrace(t, `
u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status
0,1,1,0,1,0,100,0,Pass
1,2,16,0,2,30,200,0,Failed
2,2,0,4,1,10,50,0,Pass
3,3,8,0,4,5,7,0,Killed`)
	if tr.Format != FormatGenParallel || len(tr.Jobs) != 3 || tr.Dropped != 1 {
		t.Fatalf("format %s, %d jobs, %d dropped; want gen-parallel, 3, 1", tr.Format, len(tr.Jobs), tr.Dropped)
	}
	// Submissions accumulate intervals, the CPU-only job's included.
	got := []struct {
		submit       time.Duration
		gpus, allocs int
	}{{tr.Jobs[0].Submit, tr.Jobs[0].GPUs, tr.Jobs[0].Allocs}, {tr.Jobs[1].Submit, tr.Jobs[1].GPUs, tr.Jobs[1].Allocs},
		{tr.Jobs[2].Submit, tr.Jobs[2].GPUs, tr.Jobs[2].Allocs}}
	want := []struct {
		submit       time.Duration
		gpus, allocs int
	}{{0, 1, 1}, {30 * time.Second, 8, 2}, {45 * time.Second, 2, 4}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("job %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestReadTraceErrors(t *testing.T) {
	const header = "job,submit,gpus,run_time,allocs,tier,idle_after\n"
	tests := []struct {
		name string
		csv  string
		want []string // each error, in order
	}{
		{"empty", "", []string{"empty trace"}},
		{"unknown header", "id,when\n1,2\n", []string{"line 1: header lacks column(s) job, submit, gpus, run_time"}},
		{"unknown column", "job,submit,gpus,run_time,colour\n", []string{`line 1: unknown column "colour"`}},
		{"twice", "job,submit,gpus,run_time,gpus\n", []string{`line 1: header names column "gpus" twice`}},
		{"not a number", header + "a,0,x,10,,,\n", []string{`line 2, column 3 (gpus): not a whole number: "x"`}},
		{"zero gpus", header + "a,0,0,10,,,\n", []string{"line 2, column 3 (gpus): 0 is out of range [1, 65536]"}},
		{"negative submit", header + "a,-5,1,10,,,\n", []string{"line 2, column 2 (submit): -5 seconds is out of range"}},
		{"zero run time", header + "a,0,1,0,,,\n", []string{"line 2, column 4 (run_time): must be more than 0 seconds"}},
		{"missing id", header + ",0,1,10,,,\n", []string{"line 2, column 1 (job): missing value"}},
		{"bad allocs", header + "a,0,1,10,two,,\n", []string{`line 2, column 5 (allocs): not a whole number: "two"`}},
		{"bad idle", header + "a,0,1,10,1,,soon\n", []string{`line 2, column 7 (idle_after): not a number of seconds: "soon" (or "never"`}},
		{"short row", header + "a,0,1\n", []string{"line 2: 3 fields, but the header has 7"}},
		{"duplicate", header + "a,0,1,10,,,\na,1,1,10,,,\n", []string{`line 3, column 1 (job): job "a" is already on line 2`}},
		{"bad quote", header + "a,0,1,10,,\"x,\n", []string{"CSV syntax"}},
		{"every bad row", header + "a,0,1,10,,,\nb,x,1,10,,,\nc,0,1,10,,,\nd,0,1,-1,,,\n",
			[]string{"line 3, column 2 (submit)", "line 5, column 4 (run_time)"}},
		{"gen-parallel", "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status\n0,1,1,0,0,0,10,0,Pass\n",
			[]string{"line 2, column 5 (node_num): 0 is out of range [1, 65536]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ReadTrace(strings.NewReader(tc.csv), "t")
			if err == nil {
				t.Fatalf("no error; got %d jobs", len(tr.Jobs))
			}
			msg := err.Error()
			lines := strings.Split(msg, "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("got %d errors, want %d:\n%s", len(lines), len(tc.want), msg)
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("error %d: %q\n  does not contain %q", i, lines[i], w)
				}
			}
		})
	}
}

func TestReadTraceStopsAfterTenErrors(t *testing.T) {
	csv := "job,submit,gpus,run_time\n" + strings.Repeat("a,0,x,1\n", 50)
	_, err := ReadTrace(strings.NewReader(csv), "t")
	if err == nil {
		t.Fatal("no error")
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != maxRowErrors+1 {
		t.Errorf("%d lines of errors, want %d and a last word:\n%s", n, maxRowErrors+1, err)
	}
	var re *RowError
	if !errors.As(err, &re) || re.Line != 2 || re.Column != 3 {
		t.Errorf("first error %v: want a RowError at line 2, column 3", re)
	}
}

// FuzzReadTrace feeds the parser anything: it must never panic, and what
// it accepts must be a usable trace.
func FuzzReadTrace(f *testing.F) {
	f.Add("job,submit,gpus,run_time,allocs,tenant,tier,idle_after,user\na,0,8,60,2,ml,training,never,u\n")
	f.Add("u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status\n0,1,16,0,2,0,100,0,Pass\n")
	f.Add("job,submit,gpus,run_time\nb,1e3,1,0.5\n\"c\",2,3,4\n")
	f.Add("job,submit,gpus,run_time\n\"unterminated,1,1,1\n")
	f.Add("job,submit,gpus,run_time,user\na,0,0.5,1,Jos\xe9\n")
	f.Fuzz(func(t *testing.T, src string) {
		tr, err := ReadTrace(strings.NewReader(src), "fuzz")
		if err != nil {
			if tr != nil {
				t.Fatal("a trace with an error")
			}
			return
		}
		ids := map[string]bool{}
		for i, j := range tr.Jobs {
			if j.ID == "" || ids[j.ID] || j.GPUs < 1 || j.Allocs < 1 || j.RunTime <= 0 || j.Submit < 0 {
				t.Fatalf("accepted a bad job: %+v", j)
			}
			for _, s := range []string{j.ID, j.User, j.Tenant, j.Tier} {
				if !utf8.ValidString(s) {
					t.Fatalf("accepted a job with a field that is not UTF-8: %+v", j)
				}
			}
			ids[j.ID] = true
			if i > 0 && j.Submit < tr.Jobs[i-1].Submit {
				t.Fatalf("jobs out of submission order at %d", i)
			}
		}
	})
}
