// Package testdocker gives tests a Docker daemon of the test run's own
// (internal/dockerd: no network, its roots under the run's TMPDIR,
// Steward's images built FROM scratch into it, tagged :test). One daemon
// serves every test of a test binary: Shared starts it on first use and
// Stop (from TestMain) stops it. A missing dockerd or bin/image fails the
// test with the make target that provides it; it never skips.
package testdocker

import (
	"sync"
	"testing"

	"github.com/gpu-steward/steward/internal/dockerd"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// Tag is the tag of Steward's images in the test daemon.
const Tag = "test"

// Image is the test daemon's reference of one of dockerd.Images.
func Image(name string) string { return dockerd.Image(name, Tag) }

var (
	shared    *dockerd.Daemon
	sharedErr error
	once      sync.Once
)

// Shared returns the test binary's daemon, starting it and building the
// images on first use; it fails the test when that cannot be done.
func Shared(t testing.TB) *dockerd.Daemon {
	t.Helper()
	once.Do(func() { shared, sharedErr = dockerd.Start("", testnomad.RepoRoot(t), Tag) })
	if sharedErr != nil {
		t.Fatalf("docker daemon for the tests: %v", sharedErr)
	}
	return shared
}

// Stop stops the shared daemon, if one was started, and removes its
// roots. TestMain calls it after the tests.
func Stop() {
	if shared != nil {
		shared.Stop()
	}
}
