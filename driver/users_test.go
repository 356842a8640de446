package driver

import (
	"os"
	"strings"
	"testing"
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
		wantUID     int
		wantErr     string
	}{
		{name: "no user: default_user nobody", wantUID: 65534, defaultUser: "nobody", uids: "0", gids: "0"},
		{name: "task's own user", taskUser: "daemon", defaultUser: "nobody", uids: "0", gids: "0", wantUID: 1},
		{name: "root refused by default", taskUser: "root", defaultUser: "nobody", uids: "0", gids: "0",
			wantErr: `task user "root" (the task's user) has uid 0, which steward-exec denies on this client: run the task as another user, or allow uid 0 in the client's plugin "steward-exec" config option denied_host_uids (now "0")`},
		{name: "no user and no default_user: the agent's (root), refused", uids: "0", gids: "0",
			wantErr: `(the agent's user (no user and no default_user)) has uid 0`},
		{name: "uid in a denied range", taskUser: "daemon", uids: "0,1-10", gids: "",
			wantErr: `has uid 1, which steward-exec denies`},
		{name: "group denied", taskUser: "daemon", uids: "", gids: "1",
			wantErr: `is in group 1, which steward-exec denies on this client: run the task as another user, or allow gid 1 in the client's plugin "steward-exec" config option denied_host_gids (now "1")`},
		{name: "root allowed by the operator", taskUser: "root", uids: "", gids: "", wantUID: 0},
		{name: "unknown user", taskUser: "no-such-user-xyz", uids: "0", gids: "0", wantErr: `task user "no-such-user-xyz"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.DefaultUser, cfg.DeniedHostUIDs, cfg.DeniedHostGIDs = tc.defaultUser, tc.uids, tc.gids
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
