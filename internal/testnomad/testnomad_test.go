package testnomad

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fatalT records Fatalf and ends the goroutine, as testing.T does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, args ...interface{}) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalOf runs fn with a fake T and returns its Fatalf message.
func fatalOf(t *testing.T, fn func(tb testing.TB)) string {
	ft := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ft)
	}()
	<-done
	return ft.msg
}

func TestMissingBinaryFails(t *testing.T) {
	t.Setenv(EnvNomadBin, filepath.Join(t.TempDir(), "no-nomad"))
	msg := fatalOf(t, func(tb testing.TB) { Start(tb, Options{}) })
	if !strings.Contains(msg, "nomad agent binary not found at") || !strings.Contains(msg, "run `make nomad`") {
		t.Errorf("Fatalf message %q", msg)
	}
}

func TestMissingPluginDirFails(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nomad")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvNomadBin, bin)
	t.Setenv(EnvPluginDir, filepath.Join(t.TempDir(), "no-plugins"))
	msg := fatalOf(t, func(tb testing.TB) { Start(tb, Options{}) })
	if !strings.Contains(msg, "plugin dir not found at") || !strings.Contains(msg, "run `make plugins`") {
		t.Errorf("Fatalf message %q", msg)
	}

	t.Setenv(EnvPluginDir, t.TempDir())
	msg = fatalOf(t, func(tb testing.TB) { Start(tb, Options{Plugins: []Plugin{{Name: "steward-gpu"}}}) })
	if !strings.Contains(msg, `plugin "steward-gpu" not found`) || !strings.Contains(msg, "run `make plugins`") {
		t.Errorf("Fatalf message %q", msg)
	}
}

func TestAgentConfig(t *testing.T) {
	cfg := agentConfig(Ports{HTTP: 1, RPC: 2, Serf: 3}, Options{
		LogLevel:      "INFO",
		ClientOptions: map[string]string{"driver.raw_exec.enable": "1"},
		ClientConfig:  `  node_pool = "gpu"`,
		Plugins:       []Plugin{{Name: "steward-gpu", Config: `backend = "sim"`}},
		ExtraConfig:   `telemetry { collection_interval = "1s" }`,
	})
	for _, want := range []string{
		"disable_update_check = true",
		`"fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"`,
		`"driver.raw_exec.enable" = "1"`,
		"http = 1", "rpc  = 2", "serf = 3",
		"http_max_conns_per_client = 0",
		`node_pool = "gpu"`,
		"plugin \"steward-gpu\" {\n  config {\nbackend = \"sim\"\n  }\n}",
		`telemetry { collection_interval = "1s" }`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("agent config lacks %q:\n%s", want, cfg)
		}
	}
}
