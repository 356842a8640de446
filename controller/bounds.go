package controller

import (
	"fmt"
	"strings"
	"time"
)

// Bounds on what tenants may feed the controller. Every tenant-sized
// input (request variables, job meta, job IDs, the values Steward quotes)
// is cut to a fixed size before the leader spends time or memory on it, so
// that one tenant's flood costs that tenant, never the enforcement of the
// others (docs/reference/controller.md, "Bounds").
const (
	// requestsPerNamespace is how many request variables of one
	// namespace a round reads (or deletes); the rest wait for later
	// rounds, in path order.
	requestsPerNamespace = 16
	// requestsPerRound is how many request variables a round reads in
	// all namespaces together.
	requestsPerRound = 128
	// requestBudget is the time a round spends on requests at most: the
	// rest wait for the next round, which plans without waiting for them.
	requestBudget = time.Second

	// metaValueMax is how much of each Steward meta value (steward.*) is
	// kept; a longer one is cut, marked, and refused as any bad value.
	metaValueMax = 256
	// metaKeyPrefix: job meta outside it is not Steward's and is never
	// kept (every copy of the controller caches every job).
	metaKeyPrefix = "steward."

	// stateMaxBytes is the largest job state written: Nomad refuses a
	// variable over 64 KiB, items and path together; what is over is
	// refused here with a reason that says so, before Nomad is asked.
	stateMaxBytes = 60 << 10
	// stateIDMax is the longest job ID a state carries as it is; a longer
	// one is saved as its hash, and matched against the jobs Nomad shows
	// (resolveStates).
	stateIDMax = 512

	// quoteMax is the most of any one tenant value (a job ID, a meta
	// value, a reason quoting either) the status quotes.
	quoteMax = 512
)

// clip cuts a tenant value to at most n bytes, marked with what was left
// out so no reader takes it for the whole.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	mark := fmt.Sprintf("…(%d bytes cut)", len(s)-n)
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// keptMeta is the part of a job's meta the controller keeps: Steward's
// keys only, each value cut to metaValueMax.
func keptMeta(meta map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range meta {
		if !strings.HasPrefix(k, metaKeyPrefix) || len(k) > metaValueMax {
			continue
		}
		out[k] = clip(v, metaValueMax)
	}
	return out
}
