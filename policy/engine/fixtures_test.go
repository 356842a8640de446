package engine_test

import (
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// The fixtures the stories share with package engine's own tests
// (storyfixtures_test.go, through export_test.go).
var (
	t0          = engine.T0
	testPolicy  = engine.TestPolicy
	tenant      = engine.TestTenant
	kinds       = engine.Kinds
	actionOf    = engine.ActionOf
	mustContain = engine.MustContain
	at          = engine.At
)

// jobOpt shapes a job the stories submit.
type jobOpt func(*hjob)

func gang() jobOpt                    { return func(j *hjob) { j.Job.Gang = true } }
func inPool(p string) jobOpt          { return func(j *hjob) { j.NodePool = p } }
func asks(models ...string) jobOpt    { return func(j *hjob) { j.Devices = models } }
func pinnedTo(nodes ...string) jobOpt { return func(j *hjob) { j.Nodes = nodes } }
func usage(s ...engine.Sample) jobOpt { return func(j *hjob) { j.samples = s } }
func preempted(at ...time.Time) jobOpt {
	return func(j *hjob) { j.Job.Preemptions = at }
}
