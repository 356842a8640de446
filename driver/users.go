package driver

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/lib/idset"
	"github.com/hashicorp/nomad/drivers/shared/validators"
	"github.com/hashicorp/nomad/helper/users"
	"github.com/hashicorp/nomad/plugins/drivers"
)

// Who a task runs as. steward-exec has raw_exec-level isolation: a task
// running as root owns the client. So, unlike raw_exec, root is denied by
// default (denied_host_uids/gids = "0"), and a task that names no user
// runs with its job's own uid (job_user_ids, jobuids.go), or, only where
// the operator turned those off, as default_user ("nobody"), not as the
// agent's user. A task may name a user only if allowed_task_users lists
// it (empty by default) and its uid is at least minTaskUserUID: the
// system's users (daemon, bin, ...) own host files and services, and on
// cloud GPU images the first regular user (ubuntu, 1000) has passwordless
// sudo, which the list, not the floor, must keep out.

// minTaskUserUID is the lowest uid a task may name.
const minTaskUserUID = 1000

// idPolicy holds the denied uid and gid sets.
type idPolicy struct {
	uidSpec, gidSpec string
	uids             *idset.Set[validators.UserID]
	gids             *idset.Set[validators.GroupID]
}

// newIDPolicy checks the lists with Nomad's own validator (the syntax and
// messages of raw_exec's and exec's options) and parses them with the
// idset package it uses. Nomad's Validator.HasValidIDs itself is not used:
// it counts gid 0 as a group of every user, so denying gid 0 would deny
// everyone.
func newIDPolicy(uids, gids string) (*idPolicy, error) {
	if _, err := validators.NewValidator(hclog.NewNullLogger(), uids, gids); err != nil {
		return nil, fmt.Errorf("denied_host_uids %q / denied_host_gids %q: %w", uids, gids, err)
	}
	return &idPolicy{
		uidSpec: uids, gidSpec: gids,
		uids: idset.Parse[validators.UserID](uids),
		gids: idset.Parse[validators.GroupID](gids),
	}, nil
}

// taskUser is whom a task runs as.
type taskUser struct {
	name     string
	uid, gid int
	// cred is nil when the task runs as the plugin's own user.
	cred *syscall.Credential
	// jobUID: the job's own uid, which has no passwd entry.
	jobUID bool
}

// taskUserFor picks whom a task runs as: the user it names; else, with
// job_user_ids, its job's own uid; else default_user.
func (d *Driver) taskUserFor(cfg *drivers.TaskConfig, pcfg Config) (taskUser, error) {
	policy := d.idPolicy()
	if j := pcfg.jobUIDs(); cfg.User == "" && j != nil && os.Geteuid() == 0 {
		key := jobKey(cfg)
		uid, err := j.uidFor(key)
		if err != nil {
			return taskUser{}, fmt.Errorf("a uid of its own for job %q: %w", key, err)
		}
		// SetConfig refused a range that overlaps the denied ids; this
		// check keeps it so whatever the config path.
		if policy.uids.Contains(validators.UserID(uid)) || policy.gids.Contains(validators.GroupID(uid)) {
			return taskUser{}, fmt.Errorf("job %q got uid %d from job_user_ids %q, which denied_host_uids %q or denied_host_gids %q deny",
				key, uid, pcfg.JobUserIDs, policy.uidSpec, policy.gidSpec)
		}
		return taskUser{
			name: fmt.Sprintf("uid %d (job %s)", uid, key), uid: int(uid), gid: int(uid), jobUID: true,
			cred: &syscall.Credential{Uid: uid, Gid: uid},
		}, nil
	}
	return resolveTaskUser(cfg.User, pcfg, policy)
}

// env is what the task's environment says about its user: a job uid has
// no passwd entry, and tools that need a name or a home (getpass, caches)
// look here first. Nomad gives a driver without filesystem isolation the
// agent's own environment (HOME=/root, USER=root), which is replaced; a
// value the job sets itself (one that differs from the agent's) is kept.
func (u taskUser) env(cfg *drivers.TaskConfig) map[string]string {
	if !u.jobUID {
		return nil
	}
	name := "steward-" + strconv.Itoa(u.uid)
	out := map[string]string{}
	for k, v := range map[string]string{"USER": name, "LOGNAME": name, "HOME": cfg.TaskDir().LocalDir} {
		if cur, set := cfg.Env[k]; !set || cur == os.Getenv(k) {
			out[k] = v
		}
	}
	return out
}

// resolveTaskUser picks the task's user (its own, else default_user, else
// the agent's) and refuses denied ids with a message naming the option
// that allows them.
func resolveTaskUser(taskUserName string, cfg Config, policy *idPolicy) (taskUser, error) {
	name, source := taskUserName, "the task's user"
	if name != "" && !slices.Contains(cfg.AllowedTaskUsers, name) {
		allowed := cfg.AllowedTaskUsers
		if allowed == nil {
			allowed = []string{}
		}
		return taskUser{}, fmt.Errorf("task user %q is not allowed on this client: the client's plugin %q config option allowed_task_users (now %q, %d users; empty by default) lists the users a task may name; "+
			"set no user (the task then runs as its job's own uid), or ask the operator to list it",
			name, PluginName, allowed, len(allowed))
	}
	if name == "" && cfg.DefaultUser != "" {
		name, source = cfg.DefaultUser, "default_user"
		if os.Geteuid() != 0 {
			// Only root can switch users: an unprivileged agent (a
			// developer's dev agent) runs tasks as itself, as raw_exec does.
			name, source = "", ""
		}
	}
	if name == "" {
		u, err := user.Current()
		if err != nil {
			return taskUser{}, fmt.Errorf("looking up the agent's user: %w", err)
		}
		name, source = u.Username, "the agent's user (no user and no default_user)"
	}
	u, err := users.Lookup(name)
	if err != nil {
		return taskUser{}, fmt.Errorf("task user %q (%s): %w", name, source, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return taskUser{}, fmt.Errorf("task user %q: non-numeric uid %q or gid %q", name, u.Uid, u.Gid)
	}
	if taskUserName != "" && uid < minTaskUserUID {
		return taskUser{}, fmt.Errorf("task user %q (%s) has uid %d, under %d: %s never runs a task as a system user, whatever allowed_task_users says; "+
			"set no user (the task then runs as its job's own uid)", name, source, uid, minTaskUserUID, PluginName)
	}
	if policy.uids.Contains(validators.UserID(uid)) {
		return taskUser{}, fmt.Errorf("task user %q (%s) has uid %d, which %s denies on this client: "+
			"run the task as another user, or allow uid %d in the client's plugin %q config option denied_host_uids (now %q)",
			name, source, uid, PluginName, uid, PluginName, policy.uidSpec)
	}
	if j := cfg.jobUIDs(); j != nil && uid >= uint64(j.r.lo) && uid <= uint64(j.r.hi) {
		// A host user in the job range would share a uid with a job.
		return taskUser{}, fmt.Errorf("task user %q (%s) has uid %d, in the client's plugin %q config option job_user_ids (%q), which only jobs' own uids may use",
			name, source, uid, PluginName, cfg.JobUserIDs)
	}
	groups, err := u.GroupIds()
	if err != nil {
		return taskUser{}, fmt.Errorf("task user %q: looking up its groups: %w", name, err)
	}
	groups = append(groups, u.Gid)
	for _, g := range groups {
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return taskUser{}, fmt.Errorf("task user %q: non-numeric group id %q", name, g)
		}
		if policy.gids.Contains(validators.GroupID(n)) {
			return taskUser{}, fmt.Errorf("task user %q (%s) is in group %d, which %s denies on this client: "+
				"run the task as another user, or allow gid %d in the client's plugin %q config option denied_host_gids (now %q)",
				name, source, n, PluginName, n, PluginName, policy.gidSpec)
		}
	}
	tu := taskUser{name: name, uid: int(uid), gid: int(gid)}
	if tu.uid != os.Geteuid() || tu.gid != os.Getegid() {
		tu.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return tu, nil
}
