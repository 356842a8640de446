package nomadmodel_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
)

// recorder is a State that writes down each effect it is given.
type recorder struct{ got string }

func (r *recorder) SetPriority(_ *engine.Action, p int, promoted bool) error {
	r.got = fmt.Sprintf("priority %d promoted=%v", p, promoted)
	return nil
}

func (r *recorder) Hold(_ *engine.Action, h nomadmodel.Hold) error {
	r.got = fmt.Sprintf("hold %d draining=%v", h.Count, h.Draining)
	return nil
}

func (r *recorder) Resume(_ *engine.Action, rs nomadmodel.Resume) error {
	r.got = fmt.Sprintf("resume %d ahead=%v wait=%v", rs.Count, rs.Ahead, rs.Wait)
	return nil
}

func (r *recorder) Move(_ *engine.Action, pool string) error {
	r.got = "move " + pool
	return nil
}

func (r *recorder) Stop(_ *engine.Action, s nomadmodel.Stop) error {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Sub(t0).String()
	}
	r.got = fmt.Sprintf("stop drain=%v signal=%s end=%s requeue=%v preempted=%v for=%v", s.Drain, at(s.SignalAt), at(s.End),
		s.Requeue, s.Preempted, s.For != nil)
	return nil
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestCarry: what each kind of action does, decided once for the model,
// the simulator and the forecast's replay (each carries the effect out on
// its own structures): when a preemption's victims stop (the signal a
// SignalDelay after the decision, the grace from it), whether stopped
// work is held (a preemption always, an idle stop when requeued), what a
// resume waits for, and that a priority set back is no promotion.
func TestCarry(t *testing.T) {
	b := engine.JobRef{Namespace: "b", ID: "bene"}
	for _, tc := range []struct {
		name string
		a    engine.Action
		want string
	}{
		{"preempt, no signal: stopped now, held", engine.Action{Kind: engine.Preempt, For: &b},
			"stop drain=false signal=- end=0s requeue=true preempted=true for=true"},
		{"preempt with a grace: signal after the delay, stop after the grace", engine.Action{Kind: engine.Preempt, Signal: "SIGTERM", Grace: time.Minute},
			"stop drain=true signal=1s end=1m1s requeue=true preempted=true for=false"},
		{"a signal with no grace is no drain", engine.Action{Kind: engine.Preempt, Signal: "SIGTERM"},
			"stop drain=false signal=- end=0s requeue=true preempted=true for=false"},
		{"idle stop for good", engine.Action{Kind: engine.IdleStop},
			"stop drain=false signal=- end=0s requeue=false preempted=false for=false"},
		{"idle stop requeued", engine.Action{Kind: engine.IdleStop, Requeue: true},
			"stop drain=false signal=- end=0s requeue=true preempted=false for=false"},
		{"hold", engine.Action{Kind: engine.Hold, Count: 3}, "hold 3 draining=false"},
		{"hold while victims drain", engine.Action{Kind: engine.Hold, Count: 1, Reason: engine.Reason{Rule: engine.RuleDraining}},
			"hold 1 draining=true"},
		{"a negative count holds nothing", engine.Action{Kind: engine.Hold, Count: -2}, "hold 0 draining=false"},
		{"resume ahead after victims", engine.Action{Kind: engine.Resume, Count: 2, Ahead: true, AfterVictims: true},
			"resume 2 ahead=true wait=true"},
		{"resume", engine.Action{Kind: engine.Resume, Count: 1}, "resume 1 ahead=false wait=false"},
		{"move", engine.Action{Kind: engine.Move, NodePool: "spare"}, "move spare"},
		{"promote", engine.Action{Kind: engine.Promote, Priority: 60}, "priority 60 promoted=true"},
		{"priority set back to its tier's", engine.Action{Kind: engine.SetPriority, Priority: 40}, "priority 40 promoted=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r recorder
			if err := nomadmodel.Carry(&r, &tc.a, t0); err != nil {
				t.Fatal(err)
			}
			if r.got != tc.want {
				t.Errorf("got  %s\nwant %s", r.got, tc.want)
			}
		})
	}
	if err := nomadmodel.Carry(&recorder{}, &engine.Action{Kind: "reboot"}, t0); err == nil {
		t.Error("an action of unknown kind was carried out")
	}
}
