package plugincmd

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		code    int
		stdout  string
		stderrs string
	}{
		{"-version", []string{"-version"}, 0, "steward-gpu ", ""},
		{"version", []string{"version"}, 0, "Built against Nomad", ""},
		{"anything else says how the plugin is run", []string{"serve"}, 1, "", `add a plugin "steward-gpu" block`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(&out, &errOut, "steward-gpu", c.args); code != c.code {
				t.Errorf("exit %d, want %d", code, c.code)
			}
			if !strings.Contains(out.String(), c.stdout) || !strings.Contains(errOut.String(), c.stderrs) {
				t.Errorf("stdout %q, stderr %q; want %q and %q", out.String(), errOut.String(), c.stdout, c.stderrs)
			}
		})
	}
}
