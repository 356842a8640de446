package controller

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
)

// A placeholder's task: a sleep under whichever driver its node has. Any
// node that can run GPU work should hold GPUs for a beneficiary, a node
// that runs containers alone (no raw_exec, no steward-exec) included: the
// sleep then runs in a container of an image already on the node, never
// pulled (a pull from a registry may be slow, or impossible on a cluster
// with no way out, and the GPUs would go unheld meanwhile).

// DefaultPlaceholderImage is the image placeholders run under docker:
// Steward's shell image (busybox FROM scratch), which `make image` tags
// steward/shell:local and the operator loads on the GPU nodes. "local",
// not a version: a controller upgraded without new images on the nodes
// still finds it; never "latest", which Nomad's docker driver pulls.
const DefaultPlaceholderImage = "steward/shell:local"

// placeholderDriver is the task driver a placeholder runs under on a node:
// Steward's own, else raw_exec, else docker; "" when the node has none of
// them (no placeholder there: the beneficiary takes its chances, as
// without them).
func placeholderDriver(n ObservedNode) string {
	for _, d := range []string{"steward-exec", "raw_exec", "docker"} {
		if slices.Contains(n.Drivers, d) {
			return d
		}
	}
	return ""
}

// placeholderTask is the task that sleeps secs seconds under driver (its
// resources are the caller's).
func placeholderTask(driver, image string, secs int) *api.Task {
	task := &api.Task{
		Name:        "hold",
		Driver:      driver,
		Config:      map[string]any{"command": "/bin/sleep", "args": []string{strconv.Itoa(secs)}},
		KillTimeout: ptr(time.Second),
	}
	switch driver {
	case "steward-exec":
		// No user: steward-exec refuses a named user its operator did
		// not list (allowed_task_users, empty by default). The sleep runs
		// with a uid of the placeholder's own, which the driver takes
		// back once the placeholder is gone (job_user_reclaim_after).
		task.Config["checkpoint_signal"] = policy.CheckpointNone
	case "docker":
		task.Config = map[string]any{
			"image": image,
			// The image is on the node already (docs/reference/controller.md):
			// never pulled.
			"force_pull": false,
			// No interface but the container's loopback.
			"network_mode": "none",
			// The shell of any image with one (Steward's shell image is
			// busybox): PID 1 ignores SIGTERM unless it traps it, and
			// the sleep in the background lets the trap run at once.
			"entrypoint": []string{"/bin/sh"},
			"args":       []string{"-c", fmt.Sprintf("trap 'exit 0' TERM INT; sleep %d & wait $!", secs)},
		}
		// Not root, even in its container: a uid no image needs to
		// name (nobody's, on Debian and in Steward's images).
		task.User = "65534"
	}
	return task
}

// validPlaceholderImage refuses an image reference Nomad's docker driver
// would pull: one without a tag (Docker reads it as "latest") or tagged
// "latest", which the driver pulls every time, whatever force_pull says.
// A digest (name@sha256:…) is taken as it is.
func validPlaceholderImage(image string) error {
	if image == "" {
		return fmt.Errorf("placeholder image: empty")
	}
	if strings.Contains(image, "@") {
		return nil
	}
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	if !ok || tag == "" || tag == "latest" {
		return fmt.Errorf("placeholder image %q: give a tag other than \"latest\" (Nomad pulls an untagged or latest image every time; a placeholder's image must be on the node already)", image)
	}
	return nil
}
