package controller

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// GPU utilisation is read from a device's stats by the statistic's name and
// unit, never from the device's Summary nor by position: the Summary of
// Steward's steward-gpu plugin is utilisation, but that of HashiCorp's
// nomad-device-nvidia is the memory used, in MiB. Read as a percentage, a
// busy GPU with a small model looked idle there and an idle one holding a
// big model looked busy, and nothing said so. Both plugins name the
// statistic "GPU utilization" and give it in "%" (devices/stats.go and
// nomad-device-nvidia's stats.go).
//
// A device whose stats carry no utilisation (an unknown plugin, a MIG
// instance the stock plugin leaves out of its stats, "N/A") is refused:
// neither idle nor busy, so idle rules do not act on the allocation that
// holds it, and the operator is told (gpurefusals.go).

// UtilizationStat and UtilizationUnit are the statistic the controller
// reads a GPU's utilisation from.
const (
	UtilizationStat = "GPU utilization"
	UtilizationUnit = "%"
)

// gpuReading is one device's utilisation, or why it has none.
type gpuReading struct {
	util float64
	// refused is why the device has no utilisation; "" when util holds.
	refused string
}

// gpuReadings reads each GPU device's utilisation from a node's host
// stats, by device ID. Devices of other types are left out.
func gpuReadings(stats *api.HostStats) map[string]gpuReading {
	out := map[string]gpuReading{}
	if stats == nil {
		return out
	}
	for _, g := range stats.DeviceStats {
		if g == nil || g.Type != "gpu" {
			continue
		}
		for id, s := range g.InstanceStats {
			u, why := deviceUtil(s)
			out[id] = gpuReading{util: u, refused: why}
		}
	}
	return out
}

// deviceUtil is a device's utilisation in percent from its "GPU
// utilization" statistic, or why it has none.
func deviceUtil(s *api.DeviceStats) (float64, string) {
	if s == nil || s.Stats == nil || len(s.Stats.Attributes) == 0 {
		return 0, "its stats carry no statistics"
	}
	v := s.Stats.Attributes[UtilizationStat]
	if v == nil {
		return 0, fmt.Sprintf("its stats carry no %q statistic (they carry %s)", UtilizationStat, statNames(s.Stats.Attributes))
	}
	if v.Unit != UtilizationUnit {
		return 0, fmt.Sprintf("its %q statistic is in %q, not %q", UtilizationStat, v.Unit, UtilizationUnit)
	}
	var num float64
	switch {
	case v.FloatNumeratorVal != nil:
		num = *v.FloatNumeratorVal
	case v.IntNumeratorVal != nil:
		num = float64(*v.IntNumeratorVal)
	default:
		return 0, fmt.Sprintf("its %q statistic has no number (%s)", UtilizationStat, v.String())
	}
	// A fraction (neither plugin sends one for utilisation) is a share
	// of the denominator.
	switch {
	case v.FloatDenominatorVal != nil && *v.FloatDenominatorVal > 0:
		num = 100 * num / *v.FloatDenominatorVal
	case v.IntDenominatorVal != nil && *v.IntDenominatorVal > 0:
		num = 100 * num / float64(*v.IntDenominatorVal)
	}
	return num, ""
}

// statNames lists statistics as "name (unit)", sorted, at most eight.
func statNames(attrs map[string]*api.StatValue) string {
	names := make([]string, 0, len(attrs))
	for k, v := range attrs {
		name := fmt.Sprintf("%q", k)
		if v != nil && v.Unit != "" {
			name += " (" + v.Unit + ")"
		}
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) > 8 {
		names = append(names[:8], fmt.Sprintf("and %d more", len(names)-8))
	}
	return strings.Join(names, ", ")
}

// allocUtil is the mean utilisation of an allocation's GPUs. refused, by
// device ID, are the GPUs that have no utilisation (absent from the node's
// stats included): then there is no mean, because a GPU that cannot be read
// may be the busy one. ok is false when there is nothing to judge.
func allocUtil(readings map[string]gpuReading, ids []string) (util float64, refused map[string]string, ok bool) {
	if len(ids) == 0 {
		return 0, nil, false
	}
	var sum float64
	for _, id := range ids {
		r, seen := readings[id]
		switch {
		case !seen:
			r.refused = "it is absent from its node's device stats"
		case r.refused == "":
			sum += r.util
			continue
		}
		if refused == nil {
			refused = map[string]string{}
		}
		refused[id] = r.refused
	}
	if refused != nil {
		return 0, refused, false
	}
	return sum / float64(len(ids)), nil, true
}
