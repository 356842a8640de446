package controller

import (
	"time"

	"github.com/hashicorp/go-hclog"
)

// wiring is what an owner of one of the controller's duties (the state
// store, the actor, ...) needs of the controller's wiring: its config,
// logger, Nomad and clock. It points at the controller's own fields rather
// than copying them, so that what is set on the controller after the
// owners are made (a test's clock or Nomad, a logger) holds for the owners
// too; it gives no way back to the controller itself.
type wiring struct {
	cfgp   *Config
	logp   *hclog.Logger
	nomadp *Nomad
	nowp   *func() time.Time
}

func wiringOf(c *Controller) wiring {
	return wiring{cfgp: &c.cfg, logp: &c.log, nomadp: &c.nomad, nowp: &c.now}
}

func (w wiring) cfg() *Config      { return w.cfgp }
func (w wiring) log() hclog.Logger { return *w.logp }
func (w wiring) nomad() Nomad      { return *w.nomadp }
func (w wiring) now() time.Time    { return (*w.nowp)() }

// unfenced is the Nomad client without the lease's fence: the lease's
// own writes are what prove it.
func (w wiring) unfenced() Nomad {
	if f, ok := w.nomad().(fencedNomad); ok {
		return f.Nomad
	}
	return w.nomad()
}
