//go:build !cgo

package devices

import (
	"errors"
	"fmt"

	hclog "github.com/hashicorp/go-hclog"
)

// This binary was built without cgo (CGO_ENABLED=0, as `make dist` builds
// for a platform it has no C cross compiler for): go-nvml, which loads
// libnvidia-ml.so.1 through C, is not in it. The simulated backend works;
// backend = "nvml" (the default) reports no GPUs and says why: an error in
// the plugin's log at start, and the error of any reservation.

// nvmlLib stands for go-nvml's library, which this build lacks.
type nvmlLib interface{}

func openNVML() nvmlLib { return nil }

// NVMLBuiltIn reports whether this binary has the NVML backend (built
// with cgo).
const NVMLBuiltIn = false

// errNVMLUnavailable is returned when NVML cannot be initialised.
var errNVMLUnavailable = errors.New("NVML unavailable")

// errNoNVMLInBuild says what to do about a build without NVML.
var errNoNVMLInBuild = fmt.Errorf(`%s was built without cgo (CGO_ENABLED=0), so it has no NVML backend and cannot see real GPUs: `+
	`install a build made with cgo (make dist builds one where a C compiler for the platform is found), or set backend = "sim" to simulate GPUs`, PluginName)

func newNVMLBackend(_ nvmlLib, _ hclog.Logger, _ Config, _ func(uuid, reason string)) (backend, error) {
	return nil, errNoNVMLInBuild
}
