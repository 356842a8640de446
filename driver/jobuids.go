package driver

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/client/lib/idset"
	"github.com/hashicorp/nomad/drivers/shared/validators"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/gpu-steward/steward/internal/safefs"
)

// A uid of its own per job. Unix permissions cannot separate processes
// of one uid, so jobs that all ran as default_user could read each
// other's checkpoints and reach each other's processes. With job_user_ids
// every task that names no user runs with a uid (and the same gid) taken
// from the range, one per job, like Nomad's exec2 dynamic workload users.
//
// The registry is a directory of files <uid> holding the job's key,
// created with O_EXCL, so that two jobs (or two plugin processes sharing
// a checkpoint_root over NFS) never get the same uid. It lives in the
// checkpoint_root because that is what outlives the job's allocations and
// client restarts, and what a resumed job's checkpoints are on: a job must
// find its uid again wherever its checkpoint dir is.

const (
	// jobUIDsAuto is job_user_ids' default: defaultJobUIDs when a
	// checkpoint_root holds the registry, else off.
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
// are one tenant's work, and each still has its own checkpoint dir.
func jobKey(cfg *drivers.TaskConfig) string {
	ns := cfg.Namespace
	if ns == "" {
		ns = "default"
	}
	job := cfg.JobID
	if p := cfg.Env["NOMAD_JOB_PARENT_ID"]; p != "" {
		job = p
	}
	// A namespace has no "/": the key is unambiguous.
	return ns + "/" + job
}

// jobUIDs allocates job uids from a registry below a trusted base dir.
type jobUIDs struct {
	base string // checkpoint_root
	r    idRange
	// taken says whether a host user or group already has the id (a
	// passwd or LDAP user in the range must not be handed to a job).
	taken func(id uint32) bool
}

// jobUIDs is the registry the config names, or nil when job uids are off
// (or the config was not validated: "auto").
func (c Config) jobUIDs() *jobUIDs {
	if c.JobUserIDs == "" || c.JobUserIDs == jobUIDsAuto || c.CheckpointRoot == "" {
		return nil
	}
	r, err := parseIDRange(c.JobUserIDs)
	if err != nil {
		return nil // validate refused it
	}
	return newJobUIDs(c.CheckpointRoot, r)
}

func newJobUIDs(base string, r idRange) *jobUIDs {
	return &jobUIDs{base: base, r: r, taken: hostIDTaken}
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
// it, else a free one, claimed. Probing starts at a hash of the key and
// goes up the range; a lookup stops at the first free uid, since entries
// are never removed by the plugin.
func (j *jobUIDs) uidFor(key string) (uint32, error) {
	dir, err := j.open()
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	h := fnv.New32a()
	h.Write([]byte(key))
	start, size := h.Sum32()%j.r.size(), j.r.size()
	for i := uint32(0); i < size; i++ {
		uid := j.r.lo + (start+i)%size
		name := strconv.FormatUint(uint64(uid), 10)
		for attempt := 0; attempt < 2; attempt++ {
			raw, err := dir.ReadFile(name, jobKeyLimit)
			if err == nil {
				if string(raw) == key+"\n" {
					return uid, nil
				}
				break // another job's
			}
			if !errors.Is(err, os.ErrNotExist) {
				return 0, fmt.Errorf("job uid registry entry: %w", err)
			}
			if j.taken(uid) {
				break // a host user's or group's
			}
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
	return 0, fmt.Errorf("job_user_ids %s is used up: all %d uids are taken (by the jobs in %s, or by host users): "+
		"widen the range, or remove the entries of jobs that are gone (and their checkpoint dirs)", j.r, size, dir.Path())
}
