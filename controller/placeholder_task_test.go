package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// The driver: steward-exec, else raw_exec, else docker; none of them, no
// placeholder.
func TestPlaceholderDriver(t *testing.T) {
	for _, tt := range []struct {
		drivers []string
		want    string
	}{
		{[]string{"docker", "raw_exec", "steward-exec"}, "steward-exec"},
		{[]string{"docker", "raw_exec"}, "raw_exec"},
		{[]string{"exec", "docker"}, "docker"},
		{[]string{"exec"}, ""},
		{nil, ""},
	} {
		if got := placeholderDriver(ObservedNode{Drivers: tt.drivers}); got != tt.want {
			t.Errorf("drivers %v: %q, want %q", tt.drivers, got, tt.want)
		}
	}
}

// Under docker: the configured image, never pulled, no network, not root,
// a sleep that outlives the marks by a second at most and stops at once on
// SIGTERM; the GPUs as under any driver.
func TestPlaceholderJobUnderDocker(t *testing.T) {
	c := testController(t, newFakeNomad(), withConfig(func(cfg *Config) { cfg.PlaceholderImage = "registry.local/tools/shell:1.2" }))
	nb := engine.JobRef{Namespace: "ml", ID: "nb"}
	w := placeholderWant{id: placeholderID(nb, "work", "n1"), node: ObservedNode{ID: "n1", Name: "gpu-1",
		GPUs: 8, Drivers: []string{"docker"}}, gpus: 3, bene: nb, group: "work", until: t0.Add(130 * time.Second)}
	task := c.placeholderJob(w, t0).TaskGroups[0].Tasks[0]
	cfg := task.Config
	switch {
	case task.Driver != "docker" || cfg["image"] != "registry.local/tools/shell:1.2":
		t.Errorf("driver %s, image %v", task.Driver, cfg["image"])
	case cfg["force_pull"] != false || cfg["network_mode"] != "none" || task.User != "65534":
		t.Errorf("force_pull %v, network_mode %v, user %q", cfg["force_pull"], cfg["network_mode"], task.User)
	case !slices.Equal(cfg["entrypoint"].([]string), []string{"/bin/sh"}) || !strings.Contains(cfg["args"].([]string)[1], "sleep 131 & wait"):
		t.Errorf("entrypoint %v, args %v", cfg["entrypoint"], cfg["args"])
	case *task.Resources.Devices[0].Count != 3 || *task.KillTimeout != time.Second:
		t.Errorf("devices %+v, kill timeout %v", task.Resources.Devices[0], task.KillTimeout)
	}
	c = testController(t, newFakeNomad(), withConfig(func(cfg *Config) { cfg.PlaceholderImage = "" }))
	if got := c.placeholderJob(w, t0).TaskGroups[0].Tasks[0].Config["image"]; got != DefaultPlaceholderImage {
		t.Errorf("no image configured: %v, want %s", got, DefaultPlaceholderImage)
	}
}

// An image Nomad would pull is refused at start.
func TestValidPlaceholderImage(t *testing.T) {
	for image, ok := range map[string]bool{
		"steward/shell:local":             true,
		"registry.local:5000/shell:1.2":   true,
		"busybox@sha256:0123456789abcdef": true,
		"steward/shell":                   false,
		"registry.local:5000/shell":       false,
		"steward/shell:latest":            false,
		"":                                false,
	} {
		if err := validPlaceholderImage(image); (err == nil) != ok {
			t.Errorf("%q: %v, want ok %v", image, err, ok)
		}
	}
	cfg := DefaultConfig()
	cfg.PolicyFiles = []string{"p.hcl"}
	cfg.PlaceholderImage = "steward/shell:latest"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "latest") {
		t.Errorf("Validate: %v", err)
	}
}
