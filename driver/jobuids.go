package driver

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/client/lib/idset"
	"github.com/hashicorp/nomad/drivers/shared/validators"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/gpu-steward/steward/internal/procs"
	"github.com/gpu-steward/steward/internal/safefs"
)

// A uid of its own per job. Unix permissions cannot separate processes
// of one uid, so jobs that all ran as default_user could read each
// other's checkpoints and environments (/proc/<pid>/environ) and signal
// each other's tasks. So every task that names no user runs with a uid
// (and the same gid) taken from job_user_ids, one per job, like Nomad's
// exec2 dynamic workload users, whether or not there is a
// checkpoint_root.
//
// The registry is a directory of files <uid> holding the job's key,
// created with O_EXCL, so that two jobs (or two plugin processes sharing
// a checkpoint_root over NFS) never get the same uid. With a
// checkpoint_root it lives there, because that is what outlives the
// job's allocations and client restarts, and what a resumed job's
// checkpoints are on: a job must find its uid again wherever its
// checkpoint dir is. Without one it lives in state_dir, on the client.
//
// A uid is reclaimed (given to another job that needs one) when its job
// is gone as far as the client can tell: no process on the host runs as
// it, no checkpoint dir of its namespace is its, and its entry was last
// used (a task of the job started or stopped) job_user_reclaim_after ago.
// The driver cannot ask Nomad whether the job still exists: it holds no
// token. An entry is replaced in place, never removed, so a lookup that
// stops at the first free uid still finds every job.

const (
	// jobUIDsAuto is job_user_ids' default: defaultJobUIDs.
	jobUIDsAuto = "auto"
	// defaultJobUIDs is above the systemd dynamic users (61184-65519) and
	// nobody (65534), and below the subordinate ids container runtimes
	// hand out (100000 and up, /etc/subuid).
	defaultJobUIDs = "80000-89999"
	// jobUIDRegistryDir is the registry, in checkpoint_root: a namespace
	// cannot be named so (Nomad's names are [a-zA-Z0-9-]).
	jobUIDRegistryDir = ".uids"
	// jobKeyLimit bounds what is read of a registry entry.
	jobKeyLimit = 4 << 10
)

// idRange is an inclusive range of ids.
type idRange struct{ lo, hi uint32 }

func (r idRange) String() string { return fmt.Sprintf("%d-%d", r.lo, r.hi) }

func (r idRange) size() uint32 { return r.hi - r.lo + 1 }

// parseIDRange parses job_user_ids: "lo-hi". Ids at or under 1000 are
// the system's and its first users', 65534/65535 are nobody and the
// kernel's overflow id, and 2^31 and up are not portable uids.
func parseIDRange(s string) (idRange, error) {
	lo, hi, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return idRange{}, fmt.Errorf("job_user_ids %q: must be a range like %q", s, defaultJobUIDs)
	}
	l, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 32)
	h, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 32)
	if err1 != nil || err2 != nil {
		return idRange{}, fmt.Errorf("job_user_ids %q: bounds must be numbers, like %q", s, defaultJobUIDs)
	}
	r := idRange{uint32(l), uint32(h)}
	switch {
	case l > h:
		return r, fmt.Errorf("job_user_ids %q: lower bound over upper bound", s)
	case l <= 1000:
		return r, fmt.Errorf("job_user_ids %q: must start above 1000 (system and regular users)", s)
	case h >= 1<<31:
		return r, fmt.Errorf("job_user_ids %q: must end under %d", s, uint32(1<<31))
	case l <= 65535 && h >= 65534:
		return r, fmt.Errorf("job_user_ids %q: must not include 65534 or 65535 (nobody and the overflow id)", s)
	}
	return r, nil
}

// checkDisjoint refuses a range that overlaps the denied uids or gids: a
// job's uid is also its gid, and a denied id must never be handed out.
func (r idRange) checkDisjoint(uids *idset.Set[validators.UserID], gids *idset.Set[validators.GroupID], uidSpec, gidSpec string) error {
	if id, ok := lowestIn(r, uids.Slice()); ok {
		return fmt.Errorf("job_user_ids %q overlaps denied_host_uids %q (uid %d): job uids must be allowed ids", r, uidSpec, id)
	}
	if id, ok := lowestIn(r, gids.Slice()); ok {
		return fmt.Errorf("job_user_ids %q overlaps denied_host_gids %q (gid %d): a job's gid is its uid and must be allowed", r, gidSpec, id)
	}
	return nil
}

// lowestIn is the lowest of ids in r, for a message that names one.
func lowestIn[T ~uint64](r idRange, ids []T) (uint64, bool) {
	var in []uint64
	for _, id := range ids {
		if uint64(id) >= uint64(r.lo) && uint64(id) <= uint64(r.hi) {
			in = append(in, uint64(id))
		}
	}
	if len(in) == 0 {
		return 0, false
	}
	return slices.Min(in), true
}

// jobKey identifies a job across its allocations: its namespace and ID.
// A dispatched or periodic child job is keyed by its parent, so that a
// parameterized job does not use up one uid per dispatch; its children
// are one tenant's work, and each still has its own checkpoint dir. The
// parent comes from Nomad's task identity (the allocation's job's
// ParentID), never from the task's environment: a task's env block can
// set NOMAD_JOB_PARENT_ID to another job's ID and so get its uid.
func jobKey(cfg *drivers.TaskConfig) string {
	ns := cfg.Namespace
	if ns == "" {
		ns = "default"
	}
	job := cfg.JobID
	if cfg.ParentJobID != "" {
		job = cfg.ParentJobID
	}
	// A namespace has no "/": the key is unambiguous.
	return ns + "/" + job
}

// jobUIDs allocates job uids from a registry below a trusted base dir.
type jobUIDs struct {
	base string // checkpoint_root, else state_dir
	r    idRange
	// taken says whether a host user or group already has the id (a
	// passwd or LDAP user in the range must not be handed to a job).
	taken func(id uint32) bool
	// reclaimAfter: see job_user_reclaim_after.
	reclaimAfter time.Duration
	// inUse lists the uids processes on the host run as.
	inUse func() (map[uint32]bool, error)
	now   func() time.Time
}

// jobUIDs is the registry the config names, or nil when job uids are off
// (or the config was not validated: "auto").
func (c Config) jobUIDs() *jobUIDs {
	if c.JobUserIDs == "" || c.JobUserIDs == jobUIDsAuto {
		return nil
	}
	r, err := parseIDRange(c.JobUserIDs)
	if err != nil {
		return nil // validate refused it
	}
	base := c.CheckpointRoot
	if base == "" {
		base = c.StateDir
	}
	if base == "" {
		return nil
	}
	j := newJobUIDs(base, r)
	if c.JobUserReclaimAfter > 0 {
		j.reclaimAfter = c.JobUserReclaimAfter
	}
	return j
}

func newJobUIDs(base string, r idRange) *jobUIDs {
	return &jobUIDs{base: base, r: r, taken: hostIDTaken,
		reclaimAfter: defaultJobUserReclaimAfter, inUse: procUIDs, now: time.Now}
}

// hostIDTaken says whether the host knows a user or a group with id.
func hostIDTaken(id uint32) bool {
	s := strconv.FormatUint(uint64(id), 10)
	if _, err := user.LookupId(s); err == nil {
		return true
	}
	_, err := user.LookupGroupId(s)
	return err == nil
}

// open opens (creating) the registry dir, the plugin's own (0700), without
// following a symlink.
func (j *jobUIDs) open() (*safefs.Dir, error) {
	base, err := safefs.OpenDir(j.base)
	if err != nil {
		return nil, fmt.Errorf("job uid registry: %w", err)
	}
	defer base.Close()
	dir, err := base.Sub(jobUIDRegistryDir, 0o700)
	if err != nil {
		return nil, fmt.Errorf("job uid registry: %w", err)
	}
	if err := dir.CheckNotShared(os.Geteuid()); err != nil {
		dir.Close()
		return nil, fmt.Errorf("job uid registry: %w", err)
	}
	if err := dir.Chmod(0o700); err != nil {
		dir.Close()
		return nil, fmt.Errorf("job uid registry: %w", err)
	}
	return dir, nil
}

// uidFor returns the job's uid: the one the registry already holds for
// it, else a free one, claimed, else one reclaimed from a gone job.
// Probing starts at a hash of the key and goes up the range; a lookup
// stops at the first free uid, since entries are never removed (a
// reclaimed one is replaced in place).
func (j *jobUIDs) uidFor(key string) (uint32, error) {
	dir, err := j.open()
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	h := fnv.New32a()
	h.Write([]byte(key))
	start, size := h.Sum32()%j.r.size(), j.r.size()
	var others []uint32 // other jobs' uids met on the way: reclaim candidates
	for i := uint32(0); i < size; i++ {
		uid := j.r.lo + (start+i)%size
		name := strconv.FormatUint(uint64(uid), 10)
		for attempt := 0; attempt < 2; attempt++ {
			raw, err := dir.ReadFile(name, jobKeyLimit)
			if err == nil {
				if string(raw) == key+"\n" {
					ok, err := j.touch(dir, uid, key)
					if err != nil || ok {
						return uid, err
					}
					// Reclaimed for another job meanwhile: probe on.
				}
				others = append(others, uid)
				break // another job's
			}
			if !errors.Is(err, os.ErrNotExist) {
				return 0, fmt.Errorf("job uid registry entry: %w", err)
			}
			if j.taken(uid) {
				break // a host user's or group's
			}
			// Before taking a free uid, one of a gone job, so that the
			// range is not used up by jobs that will never run again.
			if uid, ok, err := j.reclaimOne(dir, others, key); err != nil || ok {
				return uid, err
			}
			others = nil
			err = dir.CreateExclusive(name, []byte(key+"\n"), 0o600)
			if err == nil {
				return uid, nil
			}
			if !errors.Is(err, os.ErrExist) {
				return 0, fmt.Errorf("claiming uid %d for job %q: %w", uid, key, err)
			}
			// Claimed meanwhile (another task, another client): read it.
		}
	}
	if uid, ok, err := j.reclaimOne(dir, others, key); err != nil || ok {
		return uid, err
	}
	return 0, fmt.Errorf("job_user_ids %s is used up: all %d uids are taken (by the jobs in %s, or by host users), and none of a gone job "+
		"(nothing running as it, no checkpoint dir of its, unused for job_user_reclaim_after %s): "+
		"widen the range, or remove the checkpoint dirs of jobs that are gone", j.r, size, dir.Path(), j.reclaimAfter)
}

// slotLockWait bounds how long a start waits for another plugin process
// that is touching or reclaiming the same entry (a few file writes).
const slotLockWait = 5 * time.Second

// lockSlot takes the entry's lock, a file <uid>.lock created with O_EXCL,
// so that a job touching its entry and another job reclaiming it are
// serialized. wait false: give up at once when it is taken.
func (j *jobUIDs) lockSlot(dir *safefs.Dir, name string, wait bool) (unlock func(), ok bool, err error) {
	lock := name + ".lock"
	deadline := time.Now().Add(slotLockWait)
	for {
		err := dir.CreateExclusive(lock, nil, 0o600)
		if err == nil {
			return func() { _ = dir.Remove(lock) }, true, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, false, fmt.Errorf("locking job uid registry entry %s: %w", name, err)
		}
		if !wait {
			return nil, false, nil
		}
		if time.Now().After(deadline) {
			// A plugin process died holding it: nothing else holds a
			// lock this long.
			if st, err := dir.Lstat(lock); err == nil && time.Since(time.Unix(st.Mtim.Unix())) > slotLockWait {
				_ = dir.Remove(lock)
				deadline = time.Now().Add(slotLockWait)
				continue
			}
			return nil, false, fmt.Errorf("job uid registry entry %s stayed locked for %s (%s)", name, slotLockWait, filepath.Join(dir.Path(), lock))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// touch marks the job's entry used now (its mtime, rewritten), if it is
// still the job's: false when another job reclaimed it meanwhile.
func (j *jobUIDs) touch(dir *safefs.Dir, uid uint32, key string) (bool, error) {
	name := strconv.FormatUint(uint64(uid), 10)
	unlock, _, err := j.lockSlot(dir, name, true)
	if err != nil {
		return false, err
	}
	defer unlock()
	raw, err := dir.ReadFile(name, jobKeyLimit)
	if err != nil || string(raw) != key+"\n" {
		return false, nil
	}
	if err := dir.WriteFileAtomic(name, []byte(key+"\n"), 0o600); err != nil {
		return false, fmt.Errorf("marking uid %d of job %q used: %w", uid, key, err)
	}
	return true, nil
}

// used marks the job's uid used now, when one of its tasks stops: the
// reclaim delay counts from then.
func (j *jobUIDs) used(uid uint32, key string) error {
	dir, err := j.open()
	if err != nil {
		return err
	}
	defer dir.Close()
	_, err = j.touch(dir, uid, key)
	return err
}

// reclaimLock serializes reclaims in the registry: another start of the
// same job may have reclaimed one of the candidates since they were read.
const reclaimLock = "reclaim"

// reclaimOne gives key the first of the candidates whose job is gone, or
// the one another start of the same job reclaimed meanwhile.
func (j *jobUIDs) reclaimOne(dir *safefs.Dir, candidates []uint32, key string) (uint32, bool, error) {
	if len(candidates) == 0 {
		return 0, false, nil
	}
	unlockAll, _, err := j.lockSlot(dir, reclaimLock, true)
	if err != nil {
		return 0, false, err
	}
	defer unlockAll()
	for _, uid := range candidates {
		if raw, err := dir.ReadFile(strconv.FormatUint(uint64(uid), 10), jobKeyLimit); err == nil && string(raw) == key+"\n" {
			return uid, true, nil
		}
	}
	running, err := j.inUse()
	if err != nil {
		return 0, false, fmt.Errorf("listing the uids processes run as: %w", err)
	}
	for _, uid := range candidates {
		if running[uid] {
			continue
		}
		name := strconv.FormatUint(uint64(uid), 10)
		unlock, _, err := j.lockSlot(dir, name, true)
		if err != nil {
			return 0, false, err
		}
		done, err := j.reclaimLocked(dir, uid, name, key)
		unlock()
		if err != nil || done {
			return uid, done, err
		}
	}
	return 0, false, nil
}

// reclaimLocked replaces the entry with key if its job is gone; the
// caller holds the entry's lock.
func (j *jobUIDs) reclaimLocked(dir *safefs.Dir, uid uint32, name, key string) (bool, error) {
	raw, err := dir.ReadFile(name, jobKeyLimit)
	if err != nil {
		return false, nil
	}
	old := strings.TrimSuffix(string(raw), "\n")
	if old == key {
		// Another start of the same job reclaimed it meanwhile.
		return true, nil
	}
	st, err := dir.Lstat(name)
	if err != nil {
		return false, nil
	}
	if last := time.Unix(st.Mtim.Unix()); j.now().Sub(last) < j.reclaimAfter {
		return false, nil
	}
	owns, err := j.ownsCheckpointDir(uid, old)
	if err != nil || owns {
		return false, err
	}
	if err := dir.WriteFileAtomic(name, []byte(key+"\n"), 0o600); err != nil {
		return false, fmt.Errorf("reclaiming uid %d of gone job %q for job %q: %w", uid, old, key, err)
	}
	return true, nil
}

// ownsCheckpointDir says whether a job dir of the old job's namespace in
// the checkpoint_root is uid's: its checkpoints are still there, and
// whoever gets the uid would own them.
func (j *jobUIDs) ownsCheckpointDir(uid uint32, oldKey string) (bool, error) {
	ns, _, _ := strings.Cut(oldKey, "/")
	base, err := safefs.OpenDir(j.base)
	if err != nil {
		return false, fmt.Errorf("job uid registry: %w", err)
	}
	defer base.Close()
	nsDir, err := base.Open(pathPart(ns))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("checking the checkpoint dirs of uid %d: %w", uid, err)
	}
	defer nsDir.Close()
	names, err := nsDir.Names()
	if err != nil {
		return true, fmt.Errorf("checking the checkpoint dirs of uid %d: %w", uid, err)
	}
	for _, n := range names {
		if st, err := nsDir.Lstat(n); err == nil && st.Uid == uid {
			return true, nil
		}
	}
	return false, nil
}

// procUIDs lists the uids and gids (real, effective, saved, filesystem)
// every process on the host runs as: a job with a process left, even one
// its task started and left behind, is not gone.
func procUIDs() (map[uint32]bool, error) {
	h, err := procs.Host()
	if err != nil {
		return nil, err
	}
	return h.IDs()
}
