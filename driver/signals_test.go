package driver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The checkpoint signal: task config, then job meta under the key Nomad
// really sets (NOMAD_META_steward.checkpoint_signal) or its cleaned form,
// then the plugin's. A value that is not a signal is an error.
func TestCheckpointSignalFor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		config  string
		env     map[string]string
		want    string
		wantErr string
	}{
		{name: "plugin default", want: "SIGUSR1"},
		{name: "job meta as Nomad sets it", env: map[string]string{"NOMAD_META_steward.checkpoint_signal": "SIGUSR2"}, want: "SIGUSR2"},
		{name: "job meta, cleaned key", env: map[string]string{"NOMAD_META_steward_checkpoint_signal": "usr2"}, want: "SIGUSR2"},
		{name: "the real key wins", env: map[string]string{"NOMAD_META_steward.checkpoint_signal": "SIGHUP", "NOMAD_META_steward_checkpoint_signal": "SIGUSR2"}, want: "SIGHUP"},
		{name: "job meta none", env: map[string]string{"NOMAD_META_steward.checkpoint_signal": "none"}, want: "none"},
		{name: "empty job meta: the default", env: map[string]string{"NOMAD_META_steward.checkpoint_signal": " "}, want: "SIGUSR1"},
		{name: "task config beats job meta", config: "SIGTERM", env: map[string]string{"NOMAD_META_steward.checkpoint_signal": "SIGUSR2"}, want: "SIGTERM"},
		{name: "bad job meta", env: map[string]string{"NOMAD_META_steward.checkpoint_signal": "SIGFOO"},
			wantErr: `job meta steward.checkpoint_signal: "SIGFOO" is not a signal name (like "SIGUSR1", or "none"); fix the job's meta`},
		{name: "job meta Nomad cannot send", env: map[string]string{"NOMAD_META_steward.checkpoint_signal": "SIGPWR"},
			wantErr: `job meta steward.checkpoint_signal: "SIGPWR" is a signal Nomad cannot send: its raw_exec and exec drivers would send SIGINT instead; fix the job's meta`},
		{name: "bad cleaned job meta", env: map[string]string{"NOMAD_META_steward_checkpoint_signal": "sometimes"}, wantErr: `"sometimes" is not a signal name`},
		{name: "bad task config", config: "SIGFOO", wantErr: `"SIGFOO" is not a signal name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkpointSignalFor(&TaskConfig{CheckpointSignal: tc.config}, tc.env, DefaultCheckpointSignal)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

// StartTask with the plugin's defaults: root is refused with a message
// naming the option; a task without a user runs as nobody.
func TestStartTaskUsers(t *testing.T) {
	td := newTestDriver(t, func(c *Config) {
		d := DefaultConfig()
		c.DefaultUser, c.DeniedHostUIDs, c.DeniedHostGIDs = d.DefaultUser, d.DeniedHostUIDs, d.DeniedHostGIDs
		c.AllowedTaskUsers = []string{"nobody", "daemon"}
	})
	for _, tc := range []struct {
		name, user, wantErr, wantID string
	}{
		{name: "root refused", user: "root", wantErr: `task user "root" is not allowed on this client`},
		{name: "no user, job uids off: nobody", wantID: "65534:65534"},
		{name: "listed user", user: "nobody", wantID: "65534:65534"},
		{name: "listed system user refused", user: "daemon", wantErr: `has uid 1, under 1000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := td.taskLogs("t", sh(`echo "$(id -u):$(id -g)" > "$STEWARD_CHECKPOINT_DIR/id"`), tc.wantErr == "")
			cfg.User = tc.user
			// The harness's alloc dir is in a 0700 temp dir: let the task's
			// user pass.
			if err := os.Chmod(filepath.Dir(cfg.AllocDir), 0o711); err != nil {
				t.Fatal(err)
			}
			_, _, err := td.h.StartTask(cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("StartTask as %q: %v, want %q", tc.user, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res := td.wait(cfg.ID, 10*time.Second); !res.Successful() {
				t.Fatalf("exit %+v", res)
			}
			loc, _ := checkpointLocation("", cfg)
			if got := strings.TrimSpace(waitFile(t, filepath.Join(loc.path(), "id"), 5*time.Second)); got != tc.wantID {
				t.Errorf("ran as %s, want %s", got, tc.wantID)
			}
		})
	}
}
