package e2e

import (
	"os"
	"testing"

	"github.com/gpu-steward/steward/internal/testdocker"
)

// TestMain stops the Docker daemon the container tests shared
// (internal/testdocker), if one was started, after every test.
func TestMain(m *testing.M) {
	code := m.Run()
	testdocker.Stop()
	os.Exit(code)
}
