package controller

import (
	"time"

	"github.com/hashicorp/go-hclog"
)

// wiring is what the controller and each owner of one of its duties (the
// state store, the actor, ...) need of how it is wired: its config,
// logger, Nomad and clock. It is made once, by New (or a test's
// constructor), and copied by value into each owner: nothing sets any of
// it later, so the owners need no way back to the controller to see it.
// The config is shared, not copied, and read only once made. Nomad is
// decorated once, at construction (fencedNomad, dryNomad): the lease's
// fence is consulted on each write through the lease, never by swapping
// the client, so a copy sees every fence the controller sees.
type wiring struct {
	config *Config
	logger hclog.Logger
	client Nomad
	clock  func() time.Time
}

func (w wiring) cfg() *Config      { return w.config }
func (w wiring) log() hclog.Logger { return w.logger }
func (w wiring) nomad() Nomad      { return w.client }
func (w wiring) now() time.Time    { return w.clock() }

// unfenced is the Nomad client without the lease's fence: the lease's
// own writes are what prove it.
func (w wiring) unfenced() Nomad {
	if f, ok := w.nomad().(fencedNomad); ok {
		return f.Nomad
	}
	return w.nomad()
}
