package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"
)

// Who a task runs as, and which users are refused. The tests run as root
// (as `make test` does here); the users are Debian's.
func TestResolveTaskUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test switches users and must run as root")
	}
	for _, tc := range []struct {
		name        string
		taskUser    string
		defaultUser string
		uids, gids  string
		allowed     []string
		wantUID     int
		wantErr     string
	}{
		{name: "no user: default_user nobody", wantUID: 65534, defaultUser: "nobody", uids: "0", gids: "0"},
		{name: "task's own user, listed", taskUser: "nobody", allowed: []string{"nobody"}, uids: "0", gids: "0", wantUID: 65534},
		{name: "root refused by default: no list", taskUser: "root", defaultUser: "nobody", uids: "0", gids: "0",
			wantErr: `task user "root" is not allowed on this client: the client's plugin "steward-exec" config option allowed_task_users (now [], 0 users; empty by default)`},
		{name: "root listed and denied ids allow it: still refused, under 1000", taskUser: "root", allowed: []string{"root"}, uids: "", gids: "",
			wantErr: `task user "root" (the task's user) has uid 0, under 1000: steward-exec never runs a task as a system user`},
		{name: "system user listed: refused, under 1000", taskUser: "daemon", allowed: []string{"daemon"}, uids: "0", gids: "0",
			wantErr: `task user "daemon" (the task's user) has uid 1, under 1000`},
		{name: "no user and no default_user: the agent's (root), refused", uids: "0", gids: "0",
			wantErr: `(the agent's user (no user and no default_user)) has uid 0`},
		{name: "uid in a denied range", taskUser: "nobody", allowed: []string{"nobody"}, uids: "0,60000-65534", gids: "",
			wantErr: `has uid 65534, which steward-exec denies`},
		{name: "group denied", taskUser: "nobody", allowed: []string{"nobody"}, uids: "", gids: "65534",
			wantErr: `is in group 65534, which steward-exec denies on this client: run the task as another user, or allow gid 65534 in the client's plugin "steward-exec" config option denied_host_gids (now "65534")`},
		{name: "unknown user", taskUser: "no-such-user-xyz", allowed: []string{"no-such-user-xyz"}, uids: "0", gids: "0", wantErr: `task user "no-such-user-xyz"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.DefaultUser, cfg.DeniedHostUIDs, cfg.DeniedHostGIDs, cfg.AllowedTaskUsers = tc.defaultUser, tc.uids, tc.gids, tc.allowed
			u, err := resolveTaskUser(tc.taskUser, cfg, mustIDPolicy(cfg))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if u.uid != tc.wantUID || (u.cred == nil) != (tc.wantUID == 0) {
				t.Errorf("user %+v, want uid %d (a credential unless root)", u, tc.wantUID)
			}
		})
	}
}

// allowed_task_users, empty by default, lists the only users a task may
// name; default_user and job uids are not subject to it.
func TestAllowedTaskUsers(t *testing.T) {
	for _, tc := range []struct {
		name, taskUser string
		allowed        []string
		wantUID        int
		wantErr        string
	}{
		{name: "empty list (the default): no named user", taskUser: "nobody",
			wantErr: `task user "nobody" is not allowed on this client: the client's plugin "steward-exec" config option allowed_task_users (now [], 0 users; empty by default) lists the users a task may name; set no user (the task then runs as its job's own uid)`},
		{name: "listed", taskUser: "nobody", allowed: []string{"svc", "nobody"}, wantUID: 65534},
		{name: "not listed", taskUser: "bin", allowed: []string{"nobody"},
			wantErr: `task user "bin" is not allowed on this client: the client's plugin "steward-exec" config option allowed_task_users (now ["nobody"], 1 users; empty by default)`},
		{name: "no user: default_user, whatever the list", allowed: []string{"svc"}, wantUID: 65534},
		{name: "listed but denied", taskUser: "nobody", allowed: []string{"nobody"}, wantErr: "has uid 65534, which steward-exec denies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.AllowedTaskUsers = tc.allowed
			if tc.name == "listed but denied" {
				cfg.DeniedHostUIDs = "0,65534"
			}
			u, err := resolveTaskUser(tc.taskUser, cfg, mustIDPolicy(cfg))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || u.uid != tc.wantUID {
				t.Fatalf("user %+v, %v; want uid %d", u, err, tc.wantUID)
			}
		})
	}
}

// Two jobs whose tasks set no user run with uids of their own from
// job_user_ids, stable for each job; one cannot read the other's
// checkpoints. A task that names a user still runs as it.
func TestStartTaskJobUIDs(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{root, filepath.Dir(root)} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	td := newTestDriver(t, func(c *Config) {
		d := DefaultConfig()
		c.DefaultUser, c.DeniedHostUIDs, c.DeniedHostGIDs = d.DefaultUser, d.DeniedHostUIDs, d.DeniedHostGIDs
		c.CheckpointRoot, c.JobUserIDs, c.AllowedTaskUsers = root, "70000-70009", []string{"nobody"}
	})
	run := func(job, user, script string) (*drivers.TaskConfig, string) {
		t.Helper()
		cfg := td.taskLogs("t", sh(script+`; echo "$(id -u):$(id -g) $USER $HOME" > "$STEWARD_CHECKPOINT_DIR/id"`), true)
		cfg.JobID, cfg.User = job, user
		if err := os.Chmod(filepath.Dir(cfg.AllocDir), 0o711); err != nil {
			t.Fatal(err)
		}
		if _, _, err := td.h.StartTask(cfg); err != nil {
			t.Fatal(err)
		}
		if res := td.wait(cfg.ID, 10*time.Second); !res.Successful() {
			t.Fatalf("exit %+v", res)
		}
		loc, _ := checkpointLocation(root, cfg)
		return cfg, strings.TrimSpace(waitFile(t, filepath.Join(loc.path(), "id"), 5*time.Second))
	}
	aCfg, a := run("job-a", "", `echo secret-a > "$STEWARD_CHECKPOINT_DIR/ckpt"`)
	aDir, _ := checkpointLocation(root, aCfg)
	_, b := run("job-b", "", fmt.Sprintf(`cat %q/ckpt > "$STEWARD_CHECKPOINT_DIR/read" 2>&1 || true`, aDir.path()))
	_, a2 := run("job-a", "", "true")
	_, d := run("job-d", "nobody", "true")
	var aUID, bUID int
	if _, err := fmt.Sscanf(a, "%d:", &aUID); err != nil || aUID < 70000 || aUID > 70009 {
		t.Fatalf("job a ran as %q, want a uid in 70000-70009", a)
	}
	want := fmt.Sprintf("%d:%d steward-%d %s", aUID, aUID, aUID, filepath.Join(aCfg.TaskDir().Dir, "local"))
	if a != want {
		t.Errorf("job a: %q, want %q", a, want)
	}
	if _, err := fmt.Sscanf(b, "%d:", &bUID); err != nil || bUID == aUID || bUID < 70000 || bUID > 70009 {
		t.Errorf("job b ran as %q, job a as %q: want two uids of the range", b, a)
	}
	if strings.Fields(a2)[0] != strings.Fields(a)[0] {
		t.Errorf("job a ran as %q, then as %q", a, a2)
	}
	if !strings.HasPrefix(d, "65534:65534 ") {
		t.Errorf("a task naming nobody (listed) ran as %q", d)
	}
	bLoc, _ := checkpointLocation(root, &drivers.TaskConfig{Namespace: "default", JobID: "job-b", TaskGroupName: "train", Name: "t"})
	read := waitFile(t, filepath.Join(bLoc.path(), "read"), 5*time.Second)
	if strings.Contains(read, "secret-a") || !strings.Contains(read, "Permission denied") {
		t.Errorf("job b reading job a's checkpoint: %q, want Permission denied", read)
	}
	if uid, mode := ownerMode(t, filepath.Join(root, "default", "job-a")); uid != aUID || mode.Perm() != 0o700 {
		t.Errorf("job a's dir: uid %d mode %v, want %d 0700", uid, mode, aUID)
	}
}

// Without a checkpoint_root, every task that names no user still runs as
// its job's own uid (the registry is in state_dir): two tenants' jobs get
// two uids, a job keeps its uid, and a task whose env block names another
// job as NOMAD_JOB_PARENT_ID does not get that job's uid.
func TestStartTaskJobUIDsWithoutCheckpointRoot(t *testing.T) {
	state := t.TempDir()
	td := newTestDriver(t, func(c *Config) {
		d := DefaultConfig()
		c.DefaultUser, c.DeniedHostUIDs, c.DeniedHostGIDs = d.DefaultUser, d.DeniedHostUIDs, d.DeniedHostGIDs
		c.JobUserIDs, c.StateDir = "70020-70029", state
	})
	run := func(ns, job string, env map[string]string) string {
		t.Helper()
		cfg := td.taskLogs("t", sh(`echo "$(id -u):$(id -g)" > "$STEWARD_CHECKPOINT_DIR/id"`), true)
		cfg.Namespace, cfg.JobID = ns, job
		for k, v := range env {
			cfg.Env[k] = v
		}
		if err := os.Chmod(filepath.Dir(cfg.AllocDir), 0o711); err != nil {
			t.Fatal(err)
		}
		if _, _, err := td.h.StartTask(cfg); err != nil {
			t.Fatal(err)
		}
		if res := td.wait(cfg.ID, 10*time.Second); !res.Successful() {
			t.Fatalf("exit %+v", res)
		}
		loc, _ := checkpointLocation("", cfg)
		return strings.TrimSpace(waitFile(t, filepath.Join(loc.path(), "id"), 5*time.Second))
	}
	ids := map[string]string{}
	for _, tc := range []struct {
		name, ns, job string
		env           map[string]string
		sameAs        string // the case whose uid it must have; "" a new one
	}{
		{name: "tenant a's job", ns: "team-a", job: "train"},
		{name: "tenant b's job of the same name", ns: "team-b", job: "train"},
		{name: "tenant a's job again", ns: "team-a", job: "train", sameAs: "tenant a's job"},
		{name: "env naming a's job as parent", ns: "team-a", job: "thief", env: map[string]string{"NOMAD_JOB_PARENT_ID": "train"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := run(tc.ns, tc.job, tc.env)
			var uid int
			if _, err := fmt.Sscanf(got, "%d:", &uid); err != nil || uid < 70020 || uid > 70029 {
				t.Fatalf("ran as %q, want a uid of 70020-70029", got)
			}
			if tc.sameAs != "" && got != ids[tc.sameAs] {
				t.Errorf("ran as %q, want %q (%s)", got, ids[tc.sameAs], tc.sameAs)
			}
			for other, id := range ids {
				if tc.sameAs == "" && id == got {
					t.Errorf("ran as %q, as %s did", got, other)
				}
			}
			ids[tc.name] = got
		})
	}
	if names, err := os.ReadDir(filepath.Join(state, ".uids")); err != nil || len(names) != 3 {
		t.Errorf("registry in state_dir: %v (%v), want 3 entries", names, err)
	}
}
