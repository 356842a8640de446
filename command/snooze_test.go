package command

import (
	"strings"
	"testing"

	"github.com/hashicorp/cli"
)

// TestSnoozeCommandArgs: `steward snooze` refuses what is not a job and a
// duration before it talks to Nomad.
func TestSnoozeCommandArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no arguments", nil, "Usage: steward snooze"},
		{"no duration", []string{"nb"}, "Usage: steward snooze"},
		{"too many", []string{"nb", "2h", "extra"}, "Usage: steward snooze"},
		{"not a duration", []string{"nb", "two hours"}, `snooze: "two hours" is no duration such as "2h" or "90m"`},
		{"a duration without a unit", []string{"nb", "2"}, `snooze: "2" is no duration`},
		{"negative", []string{"nb", "-1h"}, `snooze: "-1h" is no duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ui := cli.NewMockUi()
			// An address nothing answers on: a test that got past the
			// arguments would fail on it, not hang.
			args := append([]string{"-address", "http://127.0.0.1:1"}, tc.args...)
			if code := (&SnoozeCommand{Meta: Meta{UI: ui}}).Run(args); code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if got := ui.ErrorWriter.String(); !strings.Contains(got, tc.want) {
				t.Errorf("stderr %q, want %q", got, tc.want)
			}
		})
	}
}
