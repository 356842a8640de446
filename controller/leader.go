package controller

import (
	"context"

	"github.com/hashicorp/nomad/api"
)

// LeaderLockPath is the variable whose lock the leader holds.
const LeaderLockPath = "steward/leader"

// elect runs lead while this controller holds the leader lock (a Nomad
// variable lock), and contends again whenever it loses it. Nomad's lock
// has a TTL the holder renews; a holder that vanishes loses it after the
// TTL, and the lock delay then keeps it free a little longer so that an
// old leader that is merely slow has stopped acting before a new one
// starts.
func (c *Controller) elect(ctx context.Context, lead func(context.Context) error) error {
	v := api.Variable{
		Namespace: c.cfg.StateNamespace,
		Path:      LeaderLockPath,
		Items:     map[string]string{"holder": c.cfg.Identity},
		Lock: &api.VariableLock{
			TTL:       c.cfg.LockTTL.String(),
			LockDelay: c.cfg.LockDelay.String(),
		},
	}
	for attempt := 0; ctx.Err() == nil; attempt++ {
		locks, err := c.client.Locks(api.WriteOptions{Namespace: c.cfg.StateNamespace}, v)
		if err != nil {
			return err
		}
		leaser := c.client.NewLockLeaser(locks, api.LockLeaserOptionWithWaitPeriod(c.cfg.LockTTL/2))
		c.log.Info("waiting to lead", "lock", LeaderLockPath, "namespace", c.cfg.StateNamespace, "identity", c.cfg.Identity)
		// The leaser releases the lock with the context it was started
		// with, so it gets one that outlives ours: on shutdown the lock is
		// handed back at once instead of expiring after its TTL.
		leaseCtx, cancelLease := context.WithCancel(context.WithoutCancel(ctx))
		err = leaser.Start(leaseCtx, func(lctx context.Context) error {
			c.log.Info("leading: this controller acts", "identity", c.cfg.Identity)
			defer c.log.Info("no longer leading", "identity", c.cfg.Identity)
			both, stop := context.WithCancel(lctx)
			defer stop()
			go func() {
				select {
				case <-ctx.Done():
					stop()
				case <-both.Done():
				}
			}()
			return lead(both)
		})
		cancelLease()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			c.log.Warn("leader election", "error", needs(err, "variables write on steward/leader", "hold the leader lock"))
		}
		sleepCtx(ctx, backoff(attempt, c.cfg.MaxBackoff))
	}
	return nil
}
