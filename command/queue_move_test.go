package command

import (
	"strings"
	"testing"

	"github.com/hashicorp/cli"
)

// TestQueueMoveArgs: steward queue move takes one job and exactly one of
// -before OTHER and -top, flags before or after the job; anything else
// exits 1 with the reason, before any request is made.
func TestQueueMoveArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "no job", args: []string{"-top"}, want: "queue move takes one job"},
		{name: "two jobs", args: []string{"a", "b", "-top"}, want: "queue move takes one job"},
		{name: "neither -before nor -top", args: []string{"a"}, want: "either -before OTHER or -top"},
		{name: "both", args: []string{"a", "-before", "b", "-top"}, want: "either -before OTHER or -top"},
		{name: "both, flags first", args: []string{"-top", "-before", "b", "a"}, want: "either -before OTHER or -top"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ui := cli.NewMockUi()
			c := &QueueMoveCommand{Meta: Meta{UI: ui}}
			if code := c.Run(tc.args); code != 1 || !strings.Contains(ui.ErrorWriter.String(), tc.want) {
				t.Errorf("exit %d, error %q; want 1 and %q", code, ui.ErrorWriter.String(), tc.want)
			}
		})
	}
}
