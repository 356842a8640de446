package engine

import (
	"testing"
	"time"
)

func TestAppendDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1500 * time.Millisecond, "2s"},
		{45 * time.Second, "45s"},
		{time.Minute, "1m"},
		{17*time.Minute + 20*time.Second, "17m20s"},
		{17*time.Minute + 400*time.Millisecond, "17m"},
		{time.Hour, "1h"},
		{time.Hour + 12*time.Minute + 31*time.Second, "1h13m"},
		{26 * time.Hour, "26h"},
	} {
		if got := string(appendDuration([]byte("x"), c.d)); got != "x"+c.want {
			t.Errorf("appendDuration(%v) = %q, want %q", c.d, got[1:], c.want)
		}
	}
}

// TestMsg checks the reason builder's pieces and that a finished reason
// keeps its text when the buffer is reused.
func TestMsg(t *testing.T) {
	var m msg
	d := &Demand{Job: Job{Ref: JobRef{"ml", "train"}}, Group: "main"}
	first := m.start("tenant ", "ml", " holds ").gpus(1).s(", ").gpus(1234).s(" for ").demand(d).reason(RuleReclaim)
	second := m.start("waiting ").dur(90 * time.Minute).s(", priority ").n(-3).reason(RulePromoteAge)
	for _, c := range []struct{ got, want string }{
		{first.Message, "tenant ml holds 1 GPU, 1234 GPUs for ml/train/main"},
		{second.Message, "waiting 1h30m, priority -3"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
