package demo

import (
	"slices"
	"testing"
)

// TestCompleteLines: a line still being written is not counted until its
// newline arrives, so that the watcher sees it whole (TestDockerDemo once
// missed the trainer's first line this way).
func TestCompleteLines(t *testing.T) {
	for _, tc := range []struct {
		name  string
		data  string
		final bool
		want  []string
	}{
		{"nothing yet", "", false, nil},
		{"a line being written", "trainer: STEWARD_RES", false, nil},
		{"a whole line and a part", "a\ntrainer: STEWARD_RES", false, []string{"a"}},
		{"whole lines", "a\nb\n", false, []string{"a", "b"}},
		{"the last read of an ended allocation keeps a last line without newline", "a\nb", true, []string{"a", "b"}},
		{"an empty line is a line", "a\n\nb\n", false, []string{"a", "", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := completeLines([]byte(tc.data), tc.final); !slices.Equal(got, tc.want) {
				t.Errorf("completeLines(%q, %v) = %q, want %q", tc.data, tc.final, got, tc.want)
			}
		})
	}
}
