package testnomad

import (
	"os"
	"path/filepath"
	"testing"
)

// RepoRoot is the directory holding go.mod, found by walking up from the
// test's working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("finding the repository root: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("finding the repository root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// NomadBin is the Nomad agent binary: $STEWARD_NOMAD_BIN, else
// <repo root>/bin/nomad. It fails the test when the file is missing.
func NomadBin(t testing.TB) string {
	t.Helper()
	return buildOutput(t, EnvNomadBin, "nomad", false, "nomad agent binary", "make nomad")
}

// PluginDir is the agent's plugin dir: $STEWARD_PLUGIN_DIR, else
// <repo root>/bin/plugins. It fails the test when it is missing.
func PluginDir(t testing.TB) string {
	t.Helper()
	return buildOutput(t, EnvPluginDir, "plugins", true, "plugin dir", "make plugins")
}

// StewardBin is the steward binary: $STEWARD_BIN, else
// <repo root>/bin/steward. It fails the test when the file is missing.
func StewardBin(t testing.TB) string {
	t.Helper()
	return buildOutput(t, EnvStewardBin, "steward", false, "steward binary", "make build")
}

// buildOutput finds something `make` builds into bin/: the path in env,
// else <repo root>/bin/<name>. A missing one fails the test, naming the
// make target that builds it: these tests never skip.
func buildOutput(t testing.TB, env, name string, dir bool, what, target string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		path = filepath.Join(RepoRoot(t), "bin", name)
	}
	path = absPath(t, path)
	if info, err := os.Stat(path); err != nil || info.IsDir() != dir {
		t.Fatalf("%s not found at %s: run `%s`", what, path, target)
	}
	return path
}

func absPath(t testing.TB, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatalf("resolving %s: %v", path, err)
	}
	return abs
}

// EnvTrainerBin points the tests at the example trainer (jobs/trainer);
// the GNUmakefile exports it.
const EnvTrainerBin = "STEWARD_TRAINER_BIN"

// TrainerBin is the example trainer: $STEWARD_TRAINER_BIN, else
// <repo root>/bin/trainer. It fails the test when the file is missing.
func TrainerBin(t testing.TB) string {
	t.Helper()
	return buildOutput(t, EnvTrainerBin, "trainer", false, "example trainer", "make trainer")
}

// EnvConsulBin points the tests at the Consul agent (built from
// tools/consul); the GNUmakefile exports it.
const EnvConsulBin = "STEWARD_CONSUL_BIN"

// ConsulBin is the Consul agent binary: $STEWARD_CONSUL_BIN, else
// <repo root>/bin/consul. It fails the test when the file is missing.
func ConsulBin(t testing.TB) string {
	t.Helper()
	return buildOutput(t, EnvConsulBin, "consul", false, "consul agent binary", "make consul")
}
