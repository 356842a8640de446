package policy

import "math"

// fairShareReclaim checks preemption.fair_share_reclaim_above: 0 (off), or
// a finite number of at least 1 (a tenant at or below its fair share is not
// "far above" it), and only with fair_share_half_life, whose decayed usage
// it reads.
func (c *checker) fairShareReclaim(p Preemption) {
	at := whereAttr(blockPreemption, "", "fair_share_reclaim_above")
	above := p.FairShareReclaimAbove
	switch {
	case above == 0:
	case !(above >= 1) || math.IsInf(above, 0):
		c.errorf(at, "Invalid fair_share_reclaim_above",
			"fair_share_reclaim_above must be 0 (off) or a number of at least 1 (times a tenant's fair share); got %g.", above)
	case p.FairShareHalfLife <= 0:
		c.errorf(at, "fair_share_reclaim_above needs fair_share_half_life",
			"fair_share_reclaim_above reclaims from tenants by their decayed use of borrowed GPUs, which only fair_share_half_life accounts: set it (e.g. \"24h\"), or fair_share_reclaim_above to 0.")
	}
}
