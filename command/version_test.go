package command

import (
	"strings"
	"testing"

	"github.com/hashicorp/cli"

	"github.com/gpu-steward/steward/internal/version"
)

func TestVersionCommand(t *testing.T) {
	old := version.Version
	version.Version = "v1.2.3-4-gabcdef0"
	t.Cleanup(func() { version.Version = old })
	cases := []struct {
		name string
		args []string
		code int
		out  []string
		err  string
	}{
		{"prints the version and what it was built against", nil, 0, []string{"Steward v1.2.3-4-gabcdef0\n", "Built against Nomad ", "Go go"}, ""},
		{"takes no arguments", []string{"extra"}, 1, nil, "version takes no arguments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ui := cli.NewMockUi()
			code := (&VersionCommand{UI: ui}).Run(c.args)
			if code != c.code {
				t.Errorf("exit %d, want %d", code, c.code)
			}
			for _, w := range c.out {
				if !strings.Contains(ui.OutputWriter.String(), w) {
					t.Errorf("output %q lacks %q", ui.OutputWriter.String(), w)
				}
			}
			if c.err != "" && !strings.Contains(ui.ErrorWriter.String(), c.err) {
				t.Errorf("error %q lacks %q", ui.ErrorWriter.String(), c.err)
			}
		})
	}
}
