//go:build !cgo

package driver

import (
	"errors"
	"sync"
)

// This binary was built without cgo (CGO_ENABLED=0, as `make dist` builds
// for a platform it has no C cross compiler for): go-nvml is not in it.
// Tasks on simulated GPUs (gpu_backend "sim") are attributed as usual; on
// real GPUs the driver attributes nothing and says why once.

// nvmlLib stands for go-nvml's library, which this build lacks.
type nvmlLib interface{}

func openNVMLLib() nvmlLib { return nil }

type sharedNVML struct{}

type nvmlOpener struct {
	newLib func() nvmlLib
	once   sync.Once
}

var errNoNVMLInBuild = errors.New(PluginName + ` was built without cgo (CGO_ENABLED=0), so it has no NVML: no per-process GPU attribution on real GPUs ` +
	`(install a build made with cgo; gpu_backend "sim" works with simulated GPUs)`)

func (o *nvmlOpener) open() (*sharedNVML, error) { return nil, errNoNVMLInBuild }

func newNVMLSampler(*sharedNVML, []string) (gpuSampler, error) { return nil, errNoNVMLInBuild }
