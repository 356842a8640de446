package controller

import (
	"bytes"
	"encoding/json"

	"github.com/hashicorp/nomad/api"
)

// The allocation list, decoded narrow, as the job list is (joblist.go).
// A full read lists every allocation meant to run with its resources
// (8,000 and more at 1,000 nodes): each entry whole carries every task's
// CPU, memory, networks and ports, and every task's events with their
// messages and details, while the observer reads the GPUs' device IDs,
// which tasks run and the checkpoint events of Steward's driver
// (toObservedAlloc). The whole list stays in memory until the read
// converts it, so its size is the read's peak: the live heap the GC
// doubles.
//
// listedAlloc is what toObservedAlloc, cacheAlloc and the read's index
// (ModifyIndex) use. An event's details are kept raw and decoded only
// for the driver's messages, the only events latestEvent reads.
type listedAlloc struct {
	ID, Name, Namespace, JobID, TaskGroup, NodeID string
	ClientStatus, DesiredStatus                   string
	JobVersion, ModifyIndex                       uint64
	CreateTime                                    int64
	AllocatedResources                            *struct {
		Tasks map[string]struct {
			Devices []struct {
				Type      string
				DeviceIDs []string
			}
		}
	}
	TaskStates map[string]*struct {
		State  string
		Events []struct {
			Type    string
			Time    int64
			Details json.RawMessage
		}
	}
}

// stewardEventKey marks the events of Steward's driver (latestEvent):
// the details of no other event are decoded.
var stewardEventKey = []byte(`"steward.event"`)

// stub is the entry as the observer reads it.
func (a *listedAlloc) stub() *api.AllocationListStub {
	s := &api.AllocationListStub{ID: a.ID, Name: a.Name, Namespace: a.Namespace, JobID: a.JobID, TaskGroup: a.TaskGroup,
		NodeID: a.NodeID, ClientStatus: a.ClientStatus, DesiredStatus: a.DesiredStatus, JobVersion: a.JobVersion,
		ModifyIndex: a.ModifyIndex, CreateTime: a.CreateTime}
	if a.AllocatedResources != nil {
		s.AllocatedResources = &api.AllocatedResources{Tasks: make(map[string]*api.AllocatedTaskResources, len(a.AllocatedResources.Tasks))}
		for name, t := range a.AllocatedResources.Tasks {
			tr := &api.AllocatedTaskResources{}
			for _, d := range t.Devices {
				if d.Type == "gpu" {
					tr.Devices = append(tr.Devices, &api.AllocatedDeviceResource{Type: d.Type, DeviceIDs: d.DeviceIDs})
				}
			}
			s.AllocatedResources.Tasks[name] = tr
		}
	}
	if a.TaskStates != nil {
		s.TaskStates = make(map[string]*api.TaskState, len(a.TaskStates))
		for name, ts := range a.TaskStates {
			if ts == nil {
				s.TaskStates[name] = nil
				continue
			}
			st := &api.TaskState{State: ts.State}
			for _, ev := range ts.Events {
				if ev.Type != api.TaskDriverMessage || !bytes.Contains(ev.Details, stewardEventKey) {
					continue
				}
				e := &api.TaskEvent{Type: ev.Type, Time: ev.Time}
				if json.Unmarshal(ev.Details, &e.Details) != nil || e.Details["steward.event"] == "" {
					continue // unreadable, or not the driver's own: latestEvent skips it
				}
				st.Events = append(st.Events, e)
			}
			s.TaskStates[name] = st
		}
	}
	return s
}

// listAllocs is one page of the allocation list, decoded narrow.
func (n *nomadClient) listAllocs(q *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error) {
	return listNarrow(n.c, "/v1/allocations", q, (*listedAlloc).stub)
}
