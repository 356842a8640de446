package devices

import (
	"math"
	"strconv"
	"strings"
)

// SimActivity is one reading of a simulated GPU's activity file.
type SimActivity struct {
	// Util is the utilisation, percent, clamped to 0..100 (decimals kept).
	Util float64
	// MemMiB is the GPU memory the task says it uses; 0 when not given.
	MemMiB uint64
}

// ParseSimActivity parses an activity file: "<utilisation %> [<memory
// used MiB>]" (docs/reference/devices.md). A tenant's task writes the file, so any
// content may turn up: ok is false for an empty, half-written or malformed
// one, and the reader keeps its last valid reading. This is the one parser
// of the format: the plugin (Stats) and the driver (its sim sampler) both
// use it, so that they cannot disagree on what a file says.
func ParseSimActivity(raw []byte) (act SimActivity, ok bool) {
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		return SimActivity{}, false
	}
	u, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || math.IsNaN(u) {
		return SimActivity{}, false
	}
	act.Util = math.Max(0, math.Min(100, u))
	if len(fields) > 1 {
		m, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			return SimActivity{}, false
		}
		act.MemMiB = m
	}
	return act, true
}
