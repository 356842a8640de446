package driver

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/base"
)

func TestPluginConfig(t *testing.T) {
	full := rawConfig{Enabled: true, GPUBackend: "auto", IdleThreshold: 10, BusyThreshold: 20}
	for _, tc := range []struct {
		name   string
		mutate func(*rawConfig)
		want   string // error substring; "" for valid
		check  func(*testing.T, Config)
	}{
		{name: "defaults", mutate: func(*rawConfig) {}, check: func(t *testing.T, c Config) {
			if c.CheckpointSignal != "SIGUSR1" || c.GPUSamplePeriod != 10*time.Second || c.IdleAfter != 10*time.Minute || c.CheckpointRoot != "" {
				t.Errorf("defaults %+v", c)
			}
		}},
		{name: "everything set", mutate: func(r *rawConfig) {
			r.CheckpointRoot, r.CheckpointSignal, r.GPUBackend = "/var/lib/steward/checkpoints/", "usr2", "sim"
			r.GPUSamplePeriod, r.IdleAfter, r.BusyAfter = "1s", "2m", "5s"
			r.IdleThreshold, r.BusyThreshold = 5, 5
		}, check: func(t *testing.T, c Config) {
			if c.CheckpointRoot != "/var/lib/steward/checkpoints" || c.CheckpointSignal != "SIGUSR2" || c.GPUBackend != "sim" ||
				c.GPUSamplePeriod != time.Second || c.IdleAfter != 2*time.Minute || c.BusyAfter != 5*time.Second || c.IdleThreshold != 5 {
				t.Errorf("config %+v", c)
			}
		}},
		{name: "checkpoint signal none", mutate: func(r *rawConfig) { r.CheckpointSignal = "none" }, check: func(t *testing.T, c Config) {
			if c.CheckpointSignal != "none" {
				t.Errorf("checkpoint signal %q", c.CheckpointSignal)
			}
		}},
		{name: "relative checkpoint root", mutate: func(r *rawConfig) { r.CheckpointRoot = "ckpt" }, want: `checkpoint_root "ckpt": must be an absolute path`},
		{name: "bad signal", mutate: func(r *rawConfig) { r.CheckpointSignal = "SIGFOO" }, want: `checkpoint_signal: "SIGFOO" is not a signal name`},
		{name: "bad backend", mutate: func(r *rawConfig) { r.GPUBackend = "cuda" }, want: `gpu_backend "cuda": must be one of`},
		{name: "bad duration", mutate: func(r *rawConfig) { r.IdleAfter = "soon" }, want: `idle_after "soon"`},
		{name: "zero period", mutate: func(r *rawConfig) { r.GPUSamplePeriod = "0s" }, want: `gpu_sample_period "0s": must be positive`},
		{name: "threshold out of range", mutate: func(r *rawConfig) { r.BusyThreshold = 150 }, want: "must be percentages"},
		{name: "root denied by default, tasks run as nobody", mutate: func(*rawConfig) {}, check: func(t *testing.T, c Config) {
			if c.DeniedHostUIDs != "0" || c.DeniedHostGIDs != "0" || c.DefaultUser != "nobody" {
				t.Errorf("denied uids %q gids %q default user %q", c.DeniedHostUIDs, c.DeniedHostGIDs, c.DefaultUser)
			}
		}},
		{name: "denied ranges and no default user", mutate: func(r *rawConfig) {
			r.DeniedHostUIDs, r.DeniedHostGIDs, r.DefaultUser = ptr("0,10-20"), ptr(""), ptr("")
		}, check: func(t *testing.T, c Config) {
			if c.DeniedHostUIDs != "0,10-20" || c.DeniedHostGIDs != "" || c.DefaultUser != "" {
				t.Errorf("denied uids %q gids %q default user %q", c.DeniedHostUIDs, c.DeniedHostGIDs, c.DefaultUser)
			}
		}},
		{name: "bad uid range", mutate: func(r *rawConfig) { r.DeniedHostUIDs = ptr("20-10") }, want: "lower bound cannot be greater than upper bound"},
		{name: "bad gid", mutate: func(r *rawConfig) { r.DeniedHostGIDs = ptr("root") }, want: "range bound not valid"},
		{name: "job uids on by default with a checkpoint root", mutate: func(r *rawConfig) { r.CheckpointRoot = "/srv/ckpt" }, check: func(t *testing.T, c Config) {
			if c.JobUserIDs != "80000-89999" || c.jobUIDs() == nil || c.AllowedTaskUsers != nil {
				t.Errorf("job_user_ids %q allowed_task_users %q", c.JobUserIDs, c.AllowedTaskUsers)
			}
		}},
		{name: "job uids on by default without a checkpoint root, registry in state_dir", mutate: func(*rawConfig) {}, check: func(t *testing.T, c Config) {
			j := c.jobUIDs()
			if c.JobUserIDs != "80000-89999" || j == nil || j.base != "/var/lib/steward-exec" || j.reclaimAfter != time.Hour {
				t.Errorf("job_user_ids %q registry %+v", c.JobUserIDs, j)
			}
		}},
		{name: "state_dir and reclaim delay set", mutate: func(r *rawConfig) { r.StateDir, r.JobUserReclaim = "/srv/steward/", "10m" }, check: func(t *testing.T, c Config) {
			if j := c.jobUIDs(); j == nil || j.base != "/srv/steward" || j.reclaimAfter != 10*time.Minute {
				t.Errorf("registry %+v", j)
			}
		}},
		{name: "relative state_dir", mutate: func(r *rawConfig) { r.StateDir = "state" }, want: `state_dir "state": must be an absolute path`},
		{name: "bad reclaim delay", mutate: func(r *rawConfig) { r.JobUserReclaim = "-1h" }, want: `job_user_reclaim_after "-1h": must be positive`},
		{name: "allowed_task_users empty by default", mutate: func(*rawConfig) {}, check: func(t *testing.T, c Config) {
			if len(c.AllowedTaskUsers) != 0 {
				t.Errorf("allowed_task_users %q", c.AllowedTaskUsers)
			}
		}},
		{name: "job uids turned off", mutate: func(r *rawConfig) { r.CheckpointRoot, r.JobUserIDs = "/srv/ckpt", ptr("") }, check: func(t *testing.T, c Config) {
			if c.JobUserIDs != "" || c.jobUIDs() != nil {
				t.Errorf("job_user_ids %q", c.JobUserIDs)
			}
		}},
		{name: "job uid range set", mutate: func(r *rawConfig) {
			r.CheckpointRoot, r.JobUserIDs, r.AllowedTaskUsers = "/srv/ckpt", ptr("200000-200999"), []string{"svc-a", " svc-b "}
		}, check: func(t *testing.T, c Config) {
			if j := c.jobUIDs(); j == nil || j.r != (idRange{200000, 200999}) || strings.Join(c.AllowedTaskUsers, ",") != "svc-a,svc-b" {
				t.Errorf("job_user_ids %q allowed_task_users %q", c.JobUserIDs, c.AllowedTaskUsers)
			}
		}},
		{name: "job uids without a checkpoint root", mutate: func(r *rawConfig) { r.JobUserIDs = ptr("80000-80999") }, check: func(t *testing.T, c Config) {
			if j := c.jobUIDs(); j == nil || j.r != (idRange{80000, 80999}) || j.base != defaultStateDir {
				t.Errorf("registry %+v", j)
			}
		}},
		{name: "bad job uid range", mutate: func(r *rawConfig) { r.CheckpointRoot, r.JobUserIDs = "/srv/ckpt", ptr("80000") },
			want: `job_user_ids "80000": must be a range`},
		{name: "job uids overlap denied uids", mutate: func(r *rawConfig) {
			r.CheckpointRoot, r.DeniedHostUIDs = "/srv/ckpt", ptr("0,85000-85010")
		}, want: `job_user_ids "80000-89999" overlaps denied_host_uids "0,85000-85010" (uid 85000)`},
		{name: "job uids overlap denied gids", mutate: func(r *rawConfig) {
			r.CheckpointRoot, r.JobUserIDs, r.DeniedHostGIDs = "/srv/ckpt", ptr("70000-70100"), ptr("70100")
		}, want: `job_user_ids "70000-70100" overlaps denied_host_gids "70100" (gid 70100)`},
		{name: "empty allowed task user", mutate: func(r *rawConfig) { r.AllowedTaskUsers = []string{"svc", " "} },
			want: "allowed_task_users: empty user name"},
		{name: "busy under idle", mutate: func(r *rawConfig) { r.IdleThreshold, r.BusyThreshold = 30, 20 }, want: "busy_threshold 20: must not be under idle_threshold 30"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := full
			tc.mutate(&raw)
			var buf []byte
			if err := base.MsgPackEncode(&buf, &raw); err != nil {
				t.Fatal(err)
			}
			cfg, err := parseConfig(&base.Config{PluginConfig: buf})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v", err)
			}
			tc.check(t, cfg)
		})
	}
}

// SetConfig rejects an invalid block with the plugin's name (the agent
// prints it and does not start).
func TestSetConfigError(t *testing.T) {
	d := New(nil)
	var buf []byte
	if err := base.MsgPackEncode(&buf, &rawConfig{GPUBackend: "cuda"}); err != nil {
		t.Fatal(err)
	}
	err := d.SetConfig(&base.Config{PluginConfig: buf})
	if err == nil || !strings.HasPrefix(err.Error(), "steward-exec: invalid plugin config: gpu_backend") {
		t.Fatalf("SetConfig: %v", err)
	}
}

func TestNormaliseSignal(t *testing.T) {
	for in, want := range map[string]string{"SIGUSR1": "SIGUSR1", "usr1": "SIGUSR1", " sigterm ": "SIGTERM", "None": "none", "SIGIOT": "SIGIOT", "poll": "SIGPOLL"} {
		if got, err := normaliseSignal(in); err != nil || got != want {
			t.Errorf("normaliseSignal(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", " ", "SIG", "USR9", "1", "SIGFOO", "SIGRTMIN"} {
		if _, err := normaliseSignal(in); err == nil {
			t.Errorf("normaliseSignal(%q) succeeded", in)
		}
	}
}

func ptr(s string) *string { return &s }
