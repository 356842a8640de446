package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-steward/steward/internal/testdocker"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestReleaseImage: `make image` builds the controller's image FROM scratch
// into a daemon with no network (the run's own, internal/testdocker),
// tagged with the repository's VERSION and "local", and the steward in it
// reports that version. Nothing is pulled: the daemon cannot reach a
// registry, so a FROM of anything but scratch would fail the build.
func TestReleaseImage(t *testing.T) {
	root := testnomad.RepoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatalf("reading VERSION: %v", err)
	}
	version := strings.TrimSpace(string(b))
	d := testdocker.Shared(t)

	build := exec.Command("make", "--no-print-directory", "image")
	build.Dir = root
	var env []string
	for _, kv := range os.Environ() {
		// VERSION overrides the file; a make above the test (make e2e)
		// passes its command-line variables down in MAKEFLAGS.
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "VERSION", "DOCKER_HOST", "MAKEFLAGS", "MFLAGS", "MAKELEVEL":
			continue
		}
		env = append(env, kv)
	}
	build.Env = append(env, "DOCKER_HOST="+d.Host)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}

	ref := "steward/controller:" + version
	out, err := d.Docker("image", "inspect", ref, "steward/controller:local")
	if err != nil {
		t.Fatalf("docker image inspect %s steward/controller:local: %v\n%s", ref, err, out)
	}
	var images []struct {
		ID     string
		Os     string
		Config struct {
			User       string
			Entrypoint []string
		}
		RootFS struct{ Layers []string }
	}
	if err := json.Unmarshal([]byte(out), &images); err != nil || len(images) != 2 {
		t.Fatalf("docker image inspect: %v (%d images)\n%s", err, len(images), out)
	}
	if images[0].ID != images[1].ID {
		t.Errorf("%s is %s but steward/controller:local is %s: make image tags one build with both", ref, images[0].ID, images[1].ID)
	}
	img := images[0]
	// FROM scratch: the layers are the Dockerfile's three COPYs, nothing under them.
	if img.Os != "linux" || img.Config.User != "65532:65532" || strings.Join(img.Config.Entrypoint, " ") != "/bin/steward" ||
		len(img.RootFS.Layers) != 3 {
		t.Errorf("%s: os %q, user %q, entrypoint %v, %d layers; want linux, 65532:65532, /bin/steward, 3 (FROM scratch)",
			ref, img.Os, img.Config.User, img.Config.Entrypoint, len(img.RootFS.Layers))
	}
	out, err = d.Docker("run", "--rm", "--network", "none", ref, "version")
	if err != nil {
		t.Fatalf("docker run %s version: %v\n%s", ref, err, out)
	}
	if !strings.HasPrefix(out, "Steward "+version+"\n") {
		t.Errorf("docker run %s version printed %q, want it to begin \"Steward %s\"", ref, out, version)
	}
}
