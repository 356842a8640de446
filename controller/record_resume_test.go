package controller

import (
	"fmt"
	"maps"
	"testing"
)

// TestResumeItems: the record's resume keys, which a job's template
// renders into STEWARD_RESUMED and STEWARD_RESUME_COUNT for any driver.
func TestResumeItems(t *testing.T) {
	tests := []struct {
		resumes int
		want    map[string]string
	}{
		{0, nil},
		{-1, nil},
		{1, map[string]string{"steward_resumed": "1", "steward_resume_count": "1"}},
		{7, map[string]string{"steward_resumed": "1", "steward_resume_count": "7"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.resumes), func(t *testing.T) {
			if got := resumeItems(tt.resumes); !maps.Equal(got, tt.want) {
				t.Errorf("resumeItems(%d) = %v, want %v", tt.resumes, got, tt.want)
			}
		})
	}
}

// TestMergeRecordItems: the owner's keys are kept, Steward's replaced,
// and the resume count never goes down (a forgotten state counts again
// from 0; its job's tasks must still read that they resume).
func TestMergeRecordItems(t *testing.T) {
	tests := []struct {
		name       string
		old, items map[string]string
		want       map[string]string
	}{
		{"first record", nil, map[string]string{"steward_state": "running"},
			map[string]string{"steward_state": "running"}},
		{"the owner's keys kept, Steward's stale ones dropped",
			map[string]string{"db_password": "x", "steward_reason": "old"},
			map[string]string{"steward_state": "running"},
			map[string]string{"db_password": "x", "steward_state": "running"}},
		{"first preemption", map[string]string{"steward_state": "running"},
			map[string]string{"steward_state": "checkpointing", "steward_resumed": "1", "steward_resume_count": "1"},
			map[string]string{"steward_state": "checkpointing", "steward_resumed": "1", "steward_resume_count": "1"}},
		{"a forgotten state: the record's count stands",
			map[string]string{"steward_resumed": "1", "steward_resume_count": "3"},
			map[string]string{"steward_state": "idle"},
			map[string]string{"steward_state": "idle", "steward_resumed": "1", "steward_resume_count": "3"}},
		{"a forgotten state preempted again: never lower",
			map[string]string{"steward_resumed": "1", "steward_resume_count": "3"},
			map[string]string{"steward_resumed": "1", "steward_resume_count": "1"},
			map[string]string{"steward_resumed": "1", "steward_resume_count": "3"}},
		{"a higher count wins", map[string]string{"steward_resumed": "1", "steward_resume_count": "2"},
			map[string]string{"steward_resumed": "1", "steward_resume_count": "5"},
			map[string]string{"steward_resumed": "1", "steward_resume_count": "5"}},
		{"a count the owner garbled is dropped", map[string]string{"steward_resume_count": "lots"},
			map[string]string{"steward_state": "running"},
			map[string]string{"steward_state": "running"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mergeRecordItems(tt.old, tt.items); !maps.Equal(got, tt.want) {
				t.Errorf("merged %v, want %v", got, tt.want)
			}
		})
	}
}
