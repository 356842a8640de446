package driver

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/gpu-steward/steward/internal/safefs"
)

func TestParseIDRange(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     idRange
		wantErr  string
	}{
		{name: "default", in: "80000-89999", want: idRange{80000, 89999}},
		{name: "spaces", in: " 70000 - 70009 ", want: idRange{70000, 70009}},
		{name: "one id", in: "70000-70000", want: idRange{70000, 70000}},
		{name: "no dash", in: "80000", wantErr: `must be a range like "80000-89999"`},
		{name: "not numbers", in: "a-b", wantErr: "bounds must be numbers"},
		{name: "negative", in: "-5-10", wantErr: "bounds must be numbers"},
		{name: "reversed", in: "89999-80000", wantErr: "lower bound over upper bound"},
		{name: "system ids", in: "500-2000", wantErr: "must start above 1000"},
		{name: "root", in: "0-10", wantErr: "must start above 1000"},
		{name: "nobody", in: "60000-70000", wantErr: "must not include 65534 or 65535"},
		{name: "too high", in: "2147483000-2147483648", wantErr: "must end under 2147483648"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseIDRange(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseIDRange(%q) = %v, %v; want error %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseIDRange(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestJobKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  drivers.TaskConfig
		want string
	}{
		{name: "namespace and job", cfg: drivers.TaskConfig{Namespace: "research", JobID: "train"}, want: "research/train"},
		{name: "no namespace", cfg: drivers.TaskConfig{JobID: "train"}, want: "default/train"},
		{name: "dispatched: its parent, from Nomad's task identity", cfg: drivers.TaskConfig{Namespace: "ml", JobID: "batch/dispatch-1-abc",
			ParentJobID: "batch", Env: map[string]string{"NOMAD_JOB_PARENT_ID": "batch"}}, want: "ml/batch"},
		{name: "env override of NOMAD_JOB_PARENT_ID ignored", cfg: drivers.TaskConfig{Namespace: "ml", JobID: "thief",
			Env: map[string]string{"NOMAD_JOB_PARENT_ID": "victim"}}, want: "ml/thief"},
		{name: "child's env naming another parent ignored", cfg: drivers.TaskConfig{Namespace: "ml", JobID: "batch/dispatch-1-abc",
			ParentJobID: "batch", Env: map[string]string{"NOMAD_JOB_PARENT_ID": "victim"}}, want: "ml/batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := jobKey(&tc.cfg); got != tc.want {
				t.Errorf("jobKey = %q, want %q", got, tc.want)
			}
		})
	}
}

// testJobUIDs is a registry in a temp root where no id is a host user's
// unless taken says so.
func testJobUIDs(t *testing.T, root string, r idRange, taken ...uint32) *jobUIDs {
	j := newJobUIDs(root, r)
	j.taken = func(id uint32) bool {
		for _, x := range taken {
			if x == id {
				return true
			}
		}
		return false
	}
	return j
}

func TestJobUIDAllocation(t *testing.T) {
	r := idRange{70000, 70009}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, root string)
	}{
		{name: "stable for one job", run: func(t *testing.T, root string) {
			j := testJobUIDs(t, root, r)
			a1 := mustUID(t, j, "ns/a")
			if a2 := mustUID(t, j, "ns/a"); a1 != a2 {
				t.Errorf("job a got %d then %d", a1, a2)
			}
			if a1 < r.lo || a1 > r.hi {
				t.Errorf("uid %d outside %v", a1, r)
			}
		}},
		{name: "distinct for two jobs", run: func(t *testing.T, root string) {
			j := testJobUIDs(t, root, r)
			if a, b := mustUID(t, j, "ns/a"), mustUID(t, j, "ns/b"); a == b {
				t.Errorf("jobs a and b both got %d", a)
			}
			if a, b := mustUID(t, j, "ns1/a"), mustUID(t, j, "ns2/a"); a == b {
				t.Errorf("job a of two namespaces both got %d", a)
			}
		}},
		{name: "collision probes the next free uid", run: func(t *testing.T, root string) {
			// Where job a lands in an empty registry; then another job
			// holds that uid: a takes the next one.
			first := mustUID(t, testJobUIDs(t, t.TempDir(), r), "ns/a")
			if err := os.Mkdir(filepath.Join(root, ".uids"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, ".uids", strconv.Itoa(int(first))), []byte("ns/other\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			j := testJobUIDs(t, root, r)
			want := r.lo + (first-r.lo+1)%r.size()
			if got := mustUID(t, j, "ns/a"); got != want {
				t.Errorf("job a got %d, want %d (the next after %d, held by another job)", got, want, first)
			}
			one := testJobUIDs(t, root, idRange{first, first})
			if _, err := one.uidFor("ns/b"); err == nil || !strings.Contains(err.Error(), "is used up") {
				t.Fatalf("a full range: %v, want used up", err)
			}
		}},
		{name: "host users are skipped", run: func(t *testing.T, root string) {
			j := testJobUIDs(t, root, idRange{70000, 70002}, 70000, 70001)
			if got := mustUID(t, j, "ns/a"); got != 70002 {
				t.Errorf("got %d, want 70002 (the others are host users')", got)
			}
			if _, err := j.uidFor("ns/b"); err == nil || !strings.Contains(err.Error(), "or by host users") {
				t.Errorf("a range of host users and one job: %v, want used up", err)
			}
		}},
		{name: "registry survives a restart", run: func(t *testing.T, root string) {
			uids := map[string]uint32{}
			for _, k := range []string{"ns/a", "ns/b", "ns/c"} {
				uids[k] = mustUID(t, testJobUIDs(t, root, r), k)
			}
			restarted := testJobUIDs(t, root, r) // a new plugin process
			for _, k := range []string{"ns/c", "ns/a", "ns/b"} {
				if got := mustUID(t, restarted, k); got != uids[k] {
					t.Errorf("%s: %d after a restart, %d before", k, got, uids[k])
				}
			}
			raw, err := os.ReadFile(filepath.Join(root, ".uids", strconv.FormatUint(uint64(uids["ns/a"]), 10)))
			if err != nil || string(raw) != "ns/a\n" {
				t.Errorf("entry %q, %v", raw, err)
			}
			if uid, mode := ownerMode(t, filepath.Join(root, ".uids")); uid != os.Geteuid() || mode.Perm() != 0o700 {
				t.Errorf("registry dir uid %d mode %v, want the plugin's, 0700", uid, mode)
			}
		}},
		{name: "concurrent starts of many jobs", run: func(t *testing.T, root string) {
			j := testJobUIDs(t, root, r)
			var mu sync.Mutex
			seen := map[uint32]string{}
			var wg sync.WaitGroup
			for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
				for range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						uid, err := j.uidFor("ns/" + k)
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							t.Error(err)
						} else if prev, ok := seen[uid]; ok && prev != k {
							t.Errorf("uid %d given to %s and %s", uid, prev, k)
						}
						seen[uid] = k
					}()
				}
			}
			wg.Wait()
			if len(seen) != 10 {
				t.Errorf("%d uids for 10 jobs: %v", len(seen), seen)
			}
		}},
		{name: "symlink as an entry refused", run: func(t *testing.T, root string) {
			j := testJobUIDs(t, root, idRange{70000, 70000})
			victim := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(victim, []byte("ns/a\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(root, ".uids"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, filepath.Join(root, ".uids", "70000")); err != nil {
				t.Fatal(err)
			}
			if _, err := j.uidFor("ns/a"); !errors.Is(err, safefs.ErrSymlink) {
				t.Fatalf("uidFor with a planted entry: %v, want a symlink refusal", err)
			}
		}},
		{name: "symlink as the registry dir refused", run: func(t *testing.T, root string) {
			j := testJobUIDs(t, root, r)
			if err := os.Symlink(t.TempDir(), filepath.Join(root, ".uids")); err != nil {
				t.Fatal(err)
			}
			if _, err := j.uidFor("ns/a"); !errors.Is(err, safefs.ErrSymlink) {
				t.Fatalf("uidFor with a planted registry: %v, want a symlink refusal", err)
			}
		}},
		{name: "registry another user can write refused", run: func(t *testing.T, root string) {
			j := testJobUIDs(t, root, r)
			if err := os.Mkdir(filepath.Join(root, ".uids"), 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(root, ".uids"), 0o777); err != nil {
				t.Fatal(err)
			}
			if _, err := j.uidFor("ns/a"); err == nil || !strings.Contains(err.Error(), "group or others can write") {
				t.Fatalf("uidFor with a shared registry: %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, t.TempDir()) })
	}
}

func mustUID(t *testing.T, j *jobUIDs, key string) uint32 {
	t.Helper()
	uid, err := j.uidFor(key)
	if err != nil {
		t.Fatalf("uidFor(%q): %v", key, err)
	}
	return uid
}

// Job uids are reclaimed once their job is gone: nothing runs as the
// uid, no checkpoint dir of its namespace is its, and its entry was last
// used job_user_reclaim_after ago. Each case fills a one-uid range with
// job a, then asks for job b's uid.
func TestJobUIDReclaim(t *testing.T) {
	const uid = 70000
	day := 24 * time.Hour
	for _, tc := range []struct {
		name string
		// age is how long ago job a's entry was last used.
		age     time.Duration
		running bool
		// ckptDir: a dir of a's namespace owned by the uid.
		ckptDir bool
		want    string // "reclaimed" or an error substring
	}{
		{name: "gone job's uid reclaimed", age: 2 * time.Hour, want: "reclaimed"},
		{name: "not while a process runs as it", age: day, running: true, want: "is used up"},
		{name: "not while a checkpoint dir is its", age: day, ckptDir: true, want: "is used up"},
		{name: "not before job_user_reclaim_after", age: 30 * time.Minute, want: "job_user_reclaim_after 1h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			j := testJobUIDs(t, root, idRange{uid, uid})
			j.inUse = func() (map[uint32]bool, error) { return map[uint32]bool{uid: tc.running}, nil }
			if got := mustUID(t, j, "ns/a"); got != uid {
				t.Fatalf("job a got %d", got)
			}
			entry := filepath.Join(root, ".uids", strconv.Itoa(uid))
			if err := os.Chtimes(entry, time.Now(), time.Now().Add(-tc.age)); err != nil {
				t.Fatal(err)
			}
			if tc.ckptDir {
				dir := filepath.Join(root, "ns", "a")
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(dir, uid, uid); err != nil {
					t.Fatal(err)
				}
			}
			got, err := j.uidFor("ns/b")
			if tc.want != "reclaimed" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("uidFor(ns/b) = %d, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err != nil || got != uid {
				t.Fatalf("uidFor(ns/b) = %d, %v; want the reclaimed %d", got, err, uid)
			}
			if raw, _ := os.ReadFile(entry); string(raw) != "ns/b\n" {
				t.Errorf("entry %q, want job b's", raw)
			}
			if _, err := os.Stat(entry + ".lock"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("lock left behind: %v", err)
			}
			// Job a, back, gets no uid: the range holds b's.
			if _, err := j.uidFor("ns/a"); err == nil {
				t.Errorf("job a got b's uid back")
			}
		})
	}
}

// A job's use (a task start or end) restarts its reclaim delay, and a
// lookup still finds a job whose probe passes a reclaimed entry.
func TestJobUIDUseKeepsIt(t *testing.T) {
	root := t.TempDir()
	r := idRange{70000, 70009}
	j := testJobUIDs(t, root, r)
	j.inUse = func() (map[uint32]bool, error) { return map[uint32]bool{}, nil }
	a := mustUID(t, j, "ns/a")
	entry := filepath.Join(root, ".uids", strconv.Itoa(int(a)))
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(entry, old, old); err != nil {
		t.Fatal(err)
	}
	if err := j.used(a, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(entry); err != nil || time.Since(info.ModTime()) > time.Minute {
		t.Fatalf("entry not marked used: %v %v", info.ModTime(), err)
	}
	if got := mustUID(t, j, "ns/a"); got != a {
		t.Errorf("job a got %d, then %d", a, got)
	}
}

// Concurrent starts of new jobs while a gone job's uid is there to take:
// each job ends with one uid, and no uid goes to two jobs.
func TestJobUIDReclaimConcurrent(t *testing.T) {
	root := t.TempDir()
	r := idRange{70000, 70003}
	j := testJobUIDs(t, root, r)
	j.inUse = func() (map[uint32]bool, error) { return map[uint32]bool{}, nil }
	for _, k := range []string{"old/a", "old/b", "old/c", "old/d"} {
		mustUID(t, j, k)
	}
	old := time.Now().Add(-2 * time.Hour)
	for uid := r.lo; uid <= r.hi; uid++ {
		if err := os.Chtimes(filepath.Join(root, ".uids", strconv.Itoa(int(uid))), old, old); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	got := map[string]map[uint32]bool{}
	var wg sync.WaitGroup
	for _, k := range []string{"new/a", "new/b"} {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				uid, err := j.uidFor(k)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				if got[k] == nil {
					got[k] = map[uint32]bool{}
				}
				got[k][uid] = true
			}()
		}
	}
	wg.Wait()
	for k, uids := range got {
		if len(uids) != 1 {
			t.Errorf("job %s got %d uids: %v", k, len(uids), uids)
		}
	}
	for uid := range got["new/a"] {
		if got["new/b"][uid] {
			t.Errorf("uid %d given to both new jobs", uid)
		}
	}
}
