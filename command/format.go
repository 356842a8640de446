package command

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/template"
	"time"
)

// outputFlags are the status-like commands' output options, as the nomad
// CLI's status commands have them: -json, -t and -verbose.
type outputFlags struct {
	json     bool
	template string
	verbose  bool
}

func (o *outputFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.json, "json", false, "")
	fs.StringVar(&o.template, "t", "", "")
	fs.BoolVar(&o.verbose, "verbose", false, "")
}

// formatted says whether the data is to be printed as JSON or through a
// template rather than as tables.
func (o *outputFlags) formatted() bool { return o.json || o.template != "" }

// format renders data as indented JSON (-json) or through a Go template
// (-t), as the nomad CLI's Format does; both at once is an error.
func (o *outputFlags) format(data any) (string, error) {
	switch {
	case o.json && o.template != "":
		return "", fmt.Errorf("both -json and -t given: use one")
	case o.json:
		b, err := json.MarshalIndent(data, "", "  ")
		if err != nil {
			return "", fmt.Errorf("encode JSON: %w", err)
		}
		return string(b), nil
	default:
		t, err := template.New("output").Parse(o.template)
		if err != nil {
			return "", fmt.Errorf("parse -t template: %w", err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return "", fmt.Errorf("execute -t template: %w", err)
		}
		return b.String(), nil
	}
}

const outputOptionsUsage = `Output Options:

  -json
    Print the data as JSON.

  -t <template>
    Format and print the data using a Go template (text/template).

  -verbose
    Print times as RFC 3339 rather than relative ("12m ago", "in ~25m").`

// when renders a time for people: relative to now ("12m ago", "in ~25m",
// approximate for the future, which is a forecast) or, verbose, RFC 3339.
// The zero time is "-".
func when(t, now time.Time, verbose bool) string {
	switch {
	case t.IsZero():
		return "-"
	case verbose:
		return t.Local().Format(time.RFC3339)
	}
	d := t.Sub(now)
	switch {
	case d >= time.Second:
		return "in ~" + shortDuration(d)
	case d > -time.Second:
		return "now"
	default:
		return shortDuration(-d) + " ago"
	}
}

// shortDuration is a duration in its two largest units: 45s, 12m, 3h5m,
// 2d3h.
func shortDuration(d time.Duration) string {
	d = d.Round(time.Second)
	days, hours := d/(24*time.Hour), (d%(24*time.Hour))/time.Hour
	mins, secs := (d%time.Hour)/time.Minute, (d%time.Minute)/time.Second
	var parts []string
	add := func(n time.Duration, unit string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d%s", n, unit))
		}
	}
	switch {
	case days > 0:
		add(days, "d")
		add(hours, "h")
	case hours > 0:
		add(hours, "h")
		add(mins, "m")
	case mins > 0:
		add(mins, "m")
	default:
		return fmt.Sprintf("%ds", secs)
	}
	return strings.Join(parts, "")
}
