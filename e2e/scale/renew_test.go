package scale

import (
	"fmt"
	"math"
)

// renewLatency is a copy's lease renewals over its life: how many, and
// their p50, p99 and largest bucket bound (steward_lease_renew_seconds).
func renewLatency(name string, p *controllerProc) string {
	mfs, err := scrape(p.addr)
	if err != nil {
		return name + " (not scraped)"
	}
	h := histogram(mfs, "steward_lease_renew_seconds")
	none := map[float64]uint64{}
	return fmt.Sprintf("%s %d renewals p50 %.3g p99 %.3g max %.3g", name, h[math.Inf(1)],
		quantileBetween(none, h, 0.5), quantileBetween(none, h, 0.99), quantileBetween(none, h, 1))
}
