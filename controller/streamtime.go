package controller

import "encoding/json"

// streamNanos is a Nomad timestamp (Unix nanoseconds) at the precision the
// event stream carries it. Nomad's API client decodes an event's payload
// into a map without json.Number, so its integers arrive as float64, whose
// 53 bits keep a timestamp of today to about 256 ns; decodeEvent writes
// that float back in its shortest decimal form (…674123457 arrives as
// …674123500). A list read keeps every nanosecond. The same evaluation
// then had two creation times, one per path, and a resync that read it
// again made its blocking look new: the decision for it was measured a
// second time from the same start, as if no round had seen it (issue 33:
// seen_after=10.361s with rounds_waiting=0, the blocking decided 443 ms
// before). Both paths keep the stream's precision.
func streamNanos(ns int64) int64 {
	b, err := json.Marshal(float64(ns))
	if err != nil {
		return ns
	}
	var out int64
	if json.Unmarshal(b, &out) != nil {
		return ns
	}
	return out
}
