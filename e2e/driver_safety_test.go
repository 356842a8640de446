package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The driver's safety on a shared client (issue #12, item 5) and the job's
// own checkpoint signal (issue #17), on a real agent. The agent runs as
// root here, as a Nomad client does.

// TestDriverRefusesRoot: a task asking steward-exec for root fails with an
// event naming the option that would allow it; a task naming no user runs
// with its job's own uid (job_user_ids, on by default with a
// checkpoint_root), not as root.
func TestDriverRefusesRoot(t *testing.T) {
	t.Parallel()
	s := startSafetyAgent(t)
	s.register(shJob{id: "as-root", driver: "steward-exec", user: "root", script: "id -u"})
	s.register(shJob{id: "no-user", driver: "steward-exec", script: `echo "uid=$(id -u) gid=$(id -g) user=$USER"`})

	failed := s.waitAlloc("default", "as-root", nil, api.AllocClientStatusFailed)
	msg := s.waitEvent(failed, "Driver Failure", `task user "root" is not allowed on this client`)
	if !strings.Contains(msg, `config option allowed_task_users (now [], 0 users; empty by default)`) {
		t.Errorf("the failure does not name the option: %s", msg)
	}
	t.Logf("root refused: %s", msg)

	done := s.waitAlloc("default", "no-user", nil, api.AllocClientStatusComplete)
	out := s.waitStdout(done, "uid=")
	var uid, gid int
	var user string
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "uid=%d gid=%d user=%s", &uid, &gid, &user); err != nil ||
		uid < 80000 || uid > 89999 || gid != uid || user != fmt.Sprintf("steward-%d", uid) {
		t.Errorf("a task without a user ran as %q, want a uid of job_user_ids' default 80000-89999 (%v)", strings.TrimSpace(out), err)
	}
}

// TestDriverCheckpointDirPrivate: two jobs that both set no user run with
// uids of their own, so a task of one (job b, tenant team-b) can neither
// read the other's checkpoint dir (job a, tenant team-a) nor its
// environment through /proc, nor list its tenant's dir; each job's
// checkpoints work. A task naming a user that allowed_task_users does not
// list fails to start.
func TestDriverCheckpointDirPrivate(t *testing.T) {
	t.Parallel()
	s := startSafetyAgent(t, `    allowed_task_users = ["nobody", "daemon"]`)
	aDir := filepath.Join(s.ckptRoot, "team-a", "a", "g", "t")
	s.register(shJob{ns: "team-a", id: "a", driver: "steward-exec", script: `set -e
echo secret-a > "$STEWARD_CHECKPOINT_DIR/ckpt"
echo "own checkpoint: $(cat "$STEWARD_CHECKPOINT_DIR/ckpt") in $STEWARD_CHECKPOINT_DIR pid=$$ uid=$(id -u)"
exec sleep 600`})
	aAlloc := s.waitAlloc("team-a", "a", nil, api.AllocClientStatusRunning)
	aOut := s.waitStdout(aAlloc, "own checkpoint:")
	if !strings.Contains(aOut, "own checkpoint: secret-a in "+aDir) {
		t.Fatalf("job a's own checkpoint: %s", aOut)
	}
	var aPid, aUID int
	if _, err := fmt.Sscanf(aOut[strings.Index(aOut, "pid="):], "pid=%d uid=%d", &aPid, &aUID); err != nil {
		t.Fatalf("job a's pid and uid in %q: %v", aOut, err)
	}

	s.register(shJob{ns: "team-b", id: "b", driver: "steward-exec", script: fmt.Sprintf(`
echo "uid=$(id -u)"
cat %[1]q/ckpt 2>&1 || echo "read other job: refused"
ls %[2]q 2>&1 || echo "list other job: refused"
ls %[3]q 2>&1 || echo "list other tenant: refused"
cat /proc/%[4]d/environ 2>&1 | tr '\0' '\n' | grep STEWARD_CHECKPOINT_DIR || echo "other job's environ: refused"
echo secret-b > "$STEWARD_CHECKPOINT_DIR/ckpt" && echo "own checkpoint: $(cat "$STEWARD_CHECKPOINT_DIR/ckpt")"
echo done`, aDir, filepath.Join(s.ckptRoot, "team-a", "a"), filepath.Join(s.ckptRoot, "team-a"), aPid)})
	bAlloc := s.waitAlloc("team-b", "b", nil, api.AllocClientStatusComplete)
	out := s.waitStdout(bAlloc, "done")
	t.Logf("job a runs as uid %d; job b (team-b, no user either) tried job a's checkpoints:\n%s", aUID, out)
	for _, want := range []string{"read other job: refused", "list other job: refused", "list other tenant: refused",
		"other job's environ: refused", "Permission denied", "own checkpoint: secret-b"} {
		if !strings.Contains(out, want) {
			t.Errorf("job b's output lacks %q", want)
		}
	}
	if strings.Contains(out, "secret-a") || strings.Contains(out, "STEWARD_CHECKPOINT_DIR="+aDir) {
		t.Errorf("job b read job a's checkpoint or environment")
	}
	var bUID int
	if _, err := fmt.Sscanf(out[strings.Index(out, "uid="):], "uid=%d", &bUID); err != nil || bUID == aUID || bUID < 80000 || bUID > 89999 {
		t.Errorf("job b ran as uid %d (%v), job a as %d: want two uids of 80000-89999", bUID, err, aUID)
	}

	// The modes behind it, as root sees them.
	for _, c := range []struct {
		path string
		uid  int
		perm os.FileMode
	}{
		{filepath.Join(s.ckptRoot, "team-a"), 0, 0o711},
		{filepath.Join(s.ckptRoot, "team-a", "a"), aUID, 0o700},
		{aDir, aUID, 0o700},
		{filepath.Join(s.ckptRoot, "team-b", "b"), bUID, 0o700},
		{filepath.Join(s.ckptRoot, ".uids"), 0, 0o700},
		{filepath.Join(s.ckptRoot, ".uids", fmt.Sprint(aUID)), 0, 0o600},
	} {
		if uid, mode := ownerAndMode(t, c.path); uid != c.uid || mode.Perm() != c.perm {
			t.Errorf("%s: uid %d mode %v, want uid %d with mode %#o", c.path, uid, mode, c.uid, c.perm)
		}
	}
	if raw, err := os.ReadFile(filepath.Join(s.ckptRoot, ".uids", fmt.Sprint(aUID))); err != nil || string(raw) != "team-a/a\n" {
		t.Errorf("registry entry of uid %d: %q (%v), want job a's key", aUID, raw, err)
	}

	// A named user: allowed if listed (and not a system user), refused
	// otherwise.
	s.register(shJob{ns: "team-b", id: "svc-ok", driver: "steward-exec", user: "nobody", script: `echo "uid=$(id -u)"`})
	s.register(shJob{ns: "team-b", id: "svc-borrow", driver: "steward-exec", user: "bin", script: "id -u"})
	s.register(shJob{ns: "team-b", id: "svc-system", driver: "steward-exec", user: "daemon", script: "id -u"})
	if out := s.waitStdout(s.waitAlloc("team-b", "svc-ok", nil, api.AllocClientStatusComplete), "uid="); !strings.Contains(out, "uid=65534") {
		t.Errorf("a task naming nobody (allowed) ran as %q", out)
	}
	failed := s.waitAlloc("team-b", "svc-borrow", nil, api.AllocClientStatusFailed)
	msg := s.waitEvent(failed, "Driver Failure", `task user "bin" is not allowed on this client`)
	if !strings.Contains(msg, `allowed_task_users (now ["nobody" "daemon"], 2 users;`) {
		t.Errorf("the failure does not name allowed_task_users: %s", msg)
	}
	t.Logf("user outside allowed_task_users: %s", msg)
	failed = s.waitAlloc("team-b", "svc-system", nil, api.AllocClientStatusFailed)
	msg = s.waitEvent(failed, "Driver Failure", `task user "daemon" (the task's user) has uid 1, under 1000`)
	t.Logf("listed system user: %s", msg)
}

// TestDriverSymlinkPlanted: symlinks a task plants where the driver (root)
// reads or writes — its preemption file, its resume marker, its checkpoint
// dir itself — are not followed; nor is a symlink in the sim dir followed
// by the device plugin, where tasks cannot plant one at all.
func TestDriverSymlinkPlanted(t *testing.T) {
	t.Parallel()
	s := startSafetyAgent(t, `    allowed_task_users = ["nobody"]`)
	files := t.TempDir()
	secret := filepath.Join(files, "secret.env") // root only
	if err := os.WriteFile(secret, []byte("reason=TOPSECRET\ngrace=1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(files, "victim.json")
	if err := os.WriteFile(victim, []byte("untouched\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// 1. The preemption file and the resume marker as symlinks.
	s.register(shJob{id: "planter", driver: "steward-exec", script: fmt.Sprintf(`
ln -s %q local/steward-preemption.env
ln -s %q "$STEWARD_CHECKPOINT_DIR/.steward-preemption.json"
trap 'echo got USR1' USR1
trap 'exit 0' INT TERM
echo planted
while :; do sleep 0.2; done`, secret, victim)})
	planter := s.waitAlloc("default", "planter", nil, api.AllocClientStatusRunning)
	s.waitStdout(planter, "planted")
	if err := s.Client.Allocations().Signal(planter, nil, "t", "SIGUSR1"); err != nil {
		t.Fatalf("signalling: %v", err)
	}
	s.waitStdout(planter, "got USR1")
	msg := s.waitEvent(planter, "Driver", "checkpoint requested (SIGUSR1): preemption expected")
	if s.hasEvent(planter, "TOPSECRET") {
		t.Errorf("the driver read a root-only file through the task's symlink")
	}
	t.Logf("event with a planted preemption file: %s", msg)
	if raw, err := os.ReadFile(victim); err != nil || string(raw) != "untouched\n" {
		t.Errorf("resume marker symlink target now %q (%v), want untouched", raw, err)
	}
	// The preemption was recorded in a new marker, in the link's place.
	marker := filepath.Join(s.ckptRoot, "default", "planter", "g", "t", ".steward-preemption.json")
	if _, mode := ownerAndMode(t, marker); !mode.IsRegular() {
		t.Errorf("resume marker is %v, want a regular file replacing the planted link", mode)
	}

	// 2. The checkpoint dir itself replaced by a symlink to another job's:
	// the next start refuses it and chowns nothing.
	s.register(shJob{id: "victim", driver: "steward-exec", user: "nobody", script: `echo v > "$STEWARD_CHECKPOINT_DIR/ckpt"; echo ok; exec sleep 600`})
	victimAlloc := s.waitAlloc("default", "victim", nil, api.AllocClientStatusRunning)
	s.waitStdout(victimAlloc, "ok")
	victimDir := filepath.Join(s.ckptRoot, "default", "victim", "g", "t")
	s.register(shJob{id: "hijack", driver: "steward-exec", restarts: 1, script: fmt.Sprintf(`
d="$STEWARD_CHECKPOINT_DIR"
mv "$d" "$d.moved" && ln -s %q "$d" && echo planted
exit 1`, victimDir)})
	hijack := s.waitAlloc("default", "hijack", nil, api.AllocClientStatusFailed)
	msg = s.waitEvent(hijack, "Driver Failure", "is a symbolic link, not followed")
	t.Logf("restart after planting a symlink as the checkpoint dir: %s", msg)
	for _, p := range []string{victimDir, filepath.Dir(filepath.Dir(victimDir))} {
		if uid, mode := ownerAndMode(t, p); uid != 65534 || mode.Perm() != 0o700 {
			t.Errorf("%s: uid %d mode %v after the hijack, want nobody's (65534) and 0700", p, uid, mode)
		}
	}

	// 3. The sim dir: a task can neither list it nor plant a link in it;
	// a link planted there (by root, the only one who can) is not read.
	s.register(shJob{id: "sim", driver: "steward-exec", gpus: 1, script: `
dir=$(dirname "$STEWARD_SIM_ACTIVITY_FILE")
echo 30 > "$STEWARD_SIM_ACTIVITY_FILE" && echo wrote
ls "$dir" >/dev/null 2>&1 || echo "list: refused"
ln -s /etc/passwd "$dir/planted" 2>/dev/null || echo "plant: refused"
echo ready
exec sleep 600`})
	sim := s.waitAlloc("default", "sim", nil, api.AllocClientStatusRunning)
	out := s.waitStdout(sim, "ready")
	for _, want := range []string{"wrote", "list: refused", "plant: refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("sim task output lacks %q:\n%s", want, out)
		}
	}
	gpu := sim.AllocatedResources.Tasks["t"].Devices[0].DeviceIDs[0]
	waitUtilisation(t, s.Agent, sim, gpu, 30, 30*time.Second)
	file := simActivityFile(t, s.simDir, gpu)
	sevens := filepath.Join(files, "sevens")
	if err := os.WriteFile(sevens, []byte("77\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sevens, file); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // stats every second
	waitUtilisation(t, s.Agent, sim, gpu, 30, 5*time.Second)
}

// TestCheckpointSignalFromJobMeta: a job whose meta names SIGUSR2 as its
// checkpoint signal gets SIGUSR2 — with steward-exec (which reads the meta
// under Nomad's real key) and with raw_exec — checkpoints, is not killed,
// and its next allocation resumes.
func TestCheckpointSignalFromJobMeta(t *testing.T) {
	t.Parallel()
	s := startSafetyAgent(t)
	for _, driver := range []string{"steward-exec", "raw_exec"} {
		t.Run(driver, func(t *testing.T) {
			s := *s
			s.t = t
			job := "meta-sig-" + strings.ReplaceAll(driver, "_", "-")
			// raw_exec has no checkpoint dir of its own: one the test gives.
			// (Plain $VAR: Nomad interpolates ${...} in task config.)
			s.register(shJob{id: job, driver: driver, meta: map[string]string{"steward.checkpoint_signal": "SIGUSR2"}, script: `
ck="$STEWARD_CHECKPOINT_DIR"
[ -n "$ck" ] || ck="` + t.TempDir() + `"
echo "start signal=$STEWARD_CHECKPOINT_SIGNAL resumed=$STEWARD_RESUMED count=$STEWARD_RESUME_COUNT"
[ -f "$ck/state" ] && echo "restored $(cat "$ck/state")"
i=0
trap 'echo "step $i" > "$ck/state"; echo "checkpoint on USR2 at step $i"' USR2
trap 'echo stopping; exit 0' INT TERM
while :; do i=$((i+1)); sleep 0.2; done`})
			first := s.waitAlloc("default", job, nil, api.AllocClientStatusRunning)
			out := s.waitStdout(first, "start ")
			if driver == "steward-exec" && !strings.Contains(out, "start signal=SIGUSR2 resumed=0 count=0") {
				t.Errorf("steward-exec told the task another checkpoint signal: %s", out)
			}
			// As the controller does: the job's checkpoint signal through the
			// allocation signal API.
			if err := s.Client.Allocations().Signal(first, nil, "t", "SIGUSR2"); err != nil {
				t.Fatalf("signalling: %v", err)
			}
			s.waitStdout(first, "checkpoint on USR2 at step")
			if driver == "steward-exec" {
				s.waitEvent(first, "Driver", "checkpoint requested (SIGUSR2)")
			}
			time.Sleep(time.Second)
			if a, _, err := s.Client.Allocations().Info(first.ID, nil); err != nil || a.ClientStatus != api.AllocClientStatusRunning {
				t.Fatalf("after SIGUSR2 the allocation is %v (%v), want still running", a.ClientStatus, err)
			}

			s.scale("default", job, 0)
			s.waitAlloc("default", job, nil, api.AllocClientStatusComplete)
			s.scale("default", job, 1)
			second := s.waitAlloc("default", job, map[string]bool{first.ID: true}, api.AllocClientStatusRunning)
			out = s.waitStdout(second, "restored step")
			t.Logf("%s, next allocation:\n%s", driver, out)
			if driver == "steward-exec" {
				if !strings.Contains(out, "start signal=SIGUSR2 resumed=1 count=1") {
					t.Errorf("the next allocation does not start with STEWARD_RESUMED=1: %s", out)
				}
				s.waitEvent(second, "Driver", "resuming after preemption 1: STEWARD_RESUMED=1")
			}
		})
	}
}

// TestDriverRejectsBadCheckpointSignal: a checkpoint signal that is not a
// signal (job meta, or task config) fails the task with a clear message.
func TestDriverRejectsBadCheckpointSignal(t *testing.T) {
	t.Parallel()
	s := startSafetyAgent(t)
	s.register(shJob{id: "bad-meta", driver: "steward-exec", meta: map[string]string{"steward.checkpoint_signal": "SIGFOO"}, script: "sleep 60"})
	s.register(shJob{id: "bad-config", driver: "steward-exec", config: map[string]any{"checkpoint_signal": "SIGFOO"}, script: "sleep 60"})
	for _, c := range []struct{ job, want string }{
		{"bad-meta", `job meta steward.checkpoint_signal: "SIGFOO" is not a signal name`},
		{"bad-config", `invalid steward-exec task config: checkpoint_signal: "SIGFOO" is not a signal name`},
	} {
		failed := s.waitAlloc("default", c.job, nil, api.AllocClientStatusFailed)
		t.Logf("%s: %s", c.job, s.waitEvent(failed, "Driver Failure", c.want))
	}
}

// TestDriverTenantsOwnUIDsWithoutCheckpointRoot: with steward-exec's
// defaults (no checkpoint_root), two tenants' tasks that set no user run
// as two uids of job_user_ids, so tenant b's task can neither read
// tenant a's environment through /proc nor signal its task. Before, both
// ran as nobody: b read a's secret and could kill it.
func TestDriverTenantsOwnUIDsWithoutCheckpointRoot(t *testing.T) {
	t.Parallel()
	s := startSafetyProd(t, "")
	s.register(shJob{ns: "team-a", id: "train", driver: "steward-exec", env: map[string]string{"TEAM_A_TOKEN": "secret-a-123"},
		script: `echo "pid=$$ uid=$(id -u)"; exec sleep 600`})
	aAlloc := s.waitAlloc("team-a", "train", nil, api.AllocClientStatusRunning)
	aOut := s.waitStdout(aAlloc, "pid=")
	var aPid, aUID int
	if _, err := fmt.Sscanf(strings.TrimSpace(aOut), "pid=%d uid=%d", &aPid, &aUID); err != nil {
		t.Fatalf("tenant a's task printed %q: %v", aOut, err)
	}
	s.register(shJob{ns: "team-b", id: "train", driver: "steward-exec", script: fmt.Sprintf(`
echo "uid=$(id -u)"
if tr '\0' '\n' < /proc/%[1]d/environ 2>/dev/null | grep TEAM_A_TOKEN; then echo "environ: read"; else echo "environ: refused"; fi
if kill -0 %[1]d 2>/dev/null; then echo "signal: sent"; else echo "signal: refused"; fi
echo done`, aPid)})
	bOut := s.waitStdout(s.waitAlloc("team-b", "train", nil, api.AllocClientStatusComplete), "done")
	t.Logf("tenant a: %s; tenant b: %s", strings.TrimSpace(aOut), strings.ReplaceAll(strings.TrimSpace(bOut), "\n", "; "))
	var bUID int
	if _, err := fmt.Sscanf(bOut, "uid=%d", &bUID); err != nil {
		t.Fatalf("tenant b's task printed %q: %v", bOut, err)
	}
	for name, uid := range map[string]int{"a": aUID, "b": bUID} {
		if uid < 80000 || uid > 89999 {
			t.Errorf("tenant %s's task ran as uid %d, want one of job_user_ids' default 80000-89999 without a checkpoint_root", name, uid)
		}
	}
	if aUID == bUID {
		t.Errorf("both tenants' tasks ran as uid %d", aUID)
	}
	if strings.Contains(bOut, "secret-a-123") || !strings.Contains(bOut, "environ: refused") {
		t.Errorf("tenant b read tenant a's environment: %q", bOut)
	}
	if !strings.Contains(bOut, "signal: refused") {
		t.Errorf("tenant b could signal tenant a's task: %q", bOut)
	}
}

// TestDriverNamedUserNotAllowedRefused: with steward-exec's defaults
// (allowed_task_users empty), a task naming a host user, even an
// unprivileged one, fails to start with a Driver Failure event naming the
// option and its count; before, any user but root ran.
func TestDriverNamedUserNotAllowedRefused(t *testing.T) {
	t.Parallel()
	s := startSafetyProd(t, "")
	s.register(shJob{ns: "team-a", id: "as-nobody", driver: "steward-exec", user: "nobody", script: `echo "uid=$(id -u)"`})
	failed := s.waitAlloc("team-a", "as-nobody", nil, api.AllocClientStatusFailed, api.AllocClientStatusComplete)
	if failed.ClientStatus == api.AllocClientStatusComplete {
		t.Fatalf("a task naming nobody, which allowed_task_users does not list, ran: %q", s.waitStdout(failed, "uid="))
	}
	msg := s.waitEvent(failed, "Driver Failure", `task user "nobody" is not allowed on this client`)
	if !strings.Contains(msg, `config option allowed_task_users (now [], 0 users; empty by default)`) {
		t.Errorf("the failure does not name allowed_task_users and its count: %s", msg)
	}
	t.Logf("named user refused: %s", msg)
}

// TestDriverParentIDEnvDoesNotChangeJobKey: a task whose env block sets
// NOMAD_JOB_PARENT_ID to another job of its namespace keeps its own job
// key: it runs as a uid of its own and cannot read that job's
// checkpoints. Before, it ran as the other job's uid and read them.
func TestDriverParentIDEnvDoesNotChangeJobKey(t *testing.T) {
	t.Parallel()
	s := startSafetyProd(t, t.TempDir())
	s.register(shJob{ns: "team-a", id: "victim", driver: "steward-exec", script: `set -e
echo secret-v > "$STEWARD_CHECKPOINT_DIR/ckpt"
echo "uid=$(id -u)"
exec sleep 600`})
	vOut := s.waitStdout(s.waitAlloc("team-a", "victim", nil, api.AllocClientStatusRunning), "uid=")
	victimCkpt := filepath.Join(s.ckptRoot, "team-a", "victim", "g", "t", "ckpt")
	s.register(shJob{ns: "team-a", id: "thief", driver: "steward-exec", env: map[string]string{"NOMAD_JOB_PARENT_ID": "victim"},
		script: fmt.Sprintf(`
echo "uid=$(id -u) parent=$NOMAD_JOB_PARENT_ID"
cat %q 2>&1 || true
echo done`, victimCkpt)})
	tOut := s.waitStdout(s.waitAlloc("team-a", "thief", nil, api.AllocClientStatusComplete), "done")
	t.Logf("victim: %s; thief: %s", strings.TrimSpace(vOut), strings.ReplaceAll(strings.TrimSpace(tOut), "\n", "; "))
	var vUID, tUID int
	if _, err := fmt.Sscanf(vOut, "uid=%d", &vUID); err != nil {
		t.Fatalf("victim printed %q: %v", vOut, err)
	}
	if _, err := fmt.Sscanf(tOut, "uid=%d", &tUID); err != nil {
		t.Fatalf("thief printed %q: %v", tOut, err)
	}
	if !strings.Contains(tOut, "parent=victim") {
		t.Errorf("the env override did not reach the task (%q): the test proves nothing", tOut)
	}
	if tUID == vUID {
		t.Errorf("the task with NOMAD_JOB_PARENT_ID=victim in its env ran as the victim's uid %d", vUID)
	}
	if strings.Contains(tOut, "secret-v") || !strings.Contains(tOut, "Permission denied") {
		t.Errorf("the thief read the victim's checkpoint: %q", tOut)
	}
	if raw, err := os.ReadFile(filepath.Join(s.ckptRoot, ".uids", fmt.Sprint(tUID))); err != nil || string(raw) != "team-a/thief\n" {
		t.Errorf("registry entry of the thief's uid %d: %q (%v), want its own key team-a/thief", tUID, raw, err)
	}
}
