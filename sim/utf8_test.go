package sim

import (
	"errors"
	"strings"
	"testing"
)

// Bytes that are not UTF-8 are rejected at their line and column, in both
// formats; comment lines are not read.
func TestReadTraceRejectsNonUTF8(t *testing.T) {
	const steward = "job,submit,gpus,run_time,user\n"
	const genParallel = "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status\n"
	tests := []struct {
		name string
		csv  string
		want string // "" when it must be read
		line int
		col  int
	}{
		{"latin-1 user", steward + "a,0,1,10,ann\nb,0,1,10,Jos\xe9\n", "line 3, column 5 (user): not valid UTF-8 (byte 4 of the field)", 3, 5},
		{"job id", steward + "\xff\xfe,0,1,10,\n", "line 2, column 1 (job): not valid UTF-8 (byte 1 of the field)", 2, 1},
		{"truncated sequence", steward + "a,0,1,10,\xe2\x82\n", "line 2, column 5 (user): not valid UTF-8 (byte 1 of the field)", 2, 5},
		{"in a number", steward + "a,0,1\x80,10,\n", "line 2, column 3 (gpus): not valid UTF-8 (byte 2 of the field)", 2, 3},
		{"header", "job,sub\xffmit,gpus,run_time\n", "line 1, column 2 (header): not valid UTF-8 (byte 4 of the field)", 1, 2},
		{"gen-parallel user", genParallel + "0,1,1,0,1,0,100,0,Pass\n1,\xc0,1,0,1,0,100,0,Pass\n",
			"line 3, column 2 (user): not valid UTF-8 (byte 1 of the field)", 3, 2},
		{"gen-parallel status", genParallel + "0,1,1,0,1,0,100,0,Pa\xffss\n",
			"line 2, column 9 (new_status): not valid UTF-8 (byte 3 of the field)", 2, 9},
		{"quoted field over two lines", steward + "a,0,1,10,\"x\ny\xff\"\n", "line 2, column 5 (user): not valid UTF-8 (byte 4 of the field)", 2, 5},
		{"comment line is not read", "# exported by caf\xe9\n" + steward + "a,0,1,10,Jos\xc3\xa9\n", "", 0, 0},
		{"valid multi-byte", steward + "a,0,1,10,日本\n", "", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ReadTrace(strings.NewReader(tc.csv), "t")
			if tc.want == "" {
				if err != nil || len(tr.Jobs) != 1 {
					t.Fatalf("error %v, want one job", err)
				}
				return
			}
			var re *RowError
			if err == nil || err.Error() != tc.want || !errors.As(err, &re) || re.Line != tc.line || re.Column != tc.col {
				t.Fatalf("error %v\nwant %s", err, tc.want)
			}
		})
	}
}
