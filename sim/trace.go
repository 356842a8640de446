package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Trace formats ReadTrace understands, told apart by their header.
const (
	// FormatSteward is Steward's own CSV: one row per job, columns by name
	// (docs/simulator.md).
	FormatSteward = "steward"
	// FormatGenParallel is the CSV of DIR-LAB/Gen-Parallel-Workloads, the
	// format of the Philly and Helios traces in ../shared/traces.
	FormatGenParallel = "gen-parallel"
)

// IdleAfter sentinels: a job's GPUs go idle after this much run time.
const (
	// IdleUnset asks Derive to pick the job's utilisation profile.
	IdleUnset time.Duration = -1
	// NeverIdle is a job that keeps its GPUs busy to the end.
	NeverIdle time.Duration = math.MaxInt64
)

// Job is one job of a trace: what it asked for and how long it ran.
// Tenant, Tier and IdleAfter may be left to Derive.
type Job struct {
	ID     string
	Line   int    // line of the trace it came from
	User   string // who submitted it, for deriving a tenant
	Submit time.Duration
	// GPUs is per allocation; Allocs allocations make the job, and a job
	// with more than one is a gang: all of them run or none.
	GPUs    int
	Allocs  int
	RunTime time.Duration // work to do: run time without interruptions
	Tenant  string        // Nomad namespace
	Tier    string
	// IdleAfter is the run time after which the job's GPUs sit idle until
	// it ends (a notebook left open): NeverIdle, or IdleUnset to derive.
	IdleAfter time.Duration
	// FractionalGPU: the trace asked for a fraction of a GPU, counted as
	// one whole GPU (the model places whole GPUs).
	FractionalGPU bool
	// Model is the GPU model the job asks for (a jobspec's device
	// "nvidia/gpu/<model>"): it runs only on nodes of that model. "" runs
	// on any.
	Model string
}

// TotalGPUs is what the job holds while it runs.
func (j *Job) TotalGPUs() int { return j.GPUs * j.Allocs }

// Trace is a parsed trace, in submission order.
type Trace struct {
	Name   string
	Format string
	Jobs   []Job
	// Dropped counts rows that are not GPU jobs (gpu_num 0 in the
	// Gen-Parallel traces: CPU-only jobs); they are not simulated.
	Dropped int
}

// RowError is a malformed value in a trace, at its line and column (the
// column counts fields, 1-based, and is named from the header).
type RowError struct {
	Line   int
	Column int
	Field  string
	Msg    string
}

func (e *RowError) Error() string {
	if e.Column == 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("line %d, column %d (%s): %s", e.Line, e.Column, e.Field, e.Msg)
}

// maxRowErrors bounds how many malformed rows one error reports.
const maxRowErrors = 10

// ReadTraceFile reads a trace file; the trace is named after the file.
func ReadTraceFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read trace %s: %w", path, err)
	}
	defer f.Close()
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	tr, err := ReadTrace(f, name)
	if err != nil {
		return nil, fmt.Errorf("read trace %s: %w", path, err)
	}
	return tr, nil
}

// ReadTrace parses a trace in either format, chosen by its header. Lines
// starting with '#' are comments. Every malformed row is reported (up to
// ten), each with its line and column; a trace with errors yields no jobs.
func ReadTrace(r io.Reader, name string) (*Trace, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1 // checked here, to say which line is short
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, errors.New("empty trace: no header line")
	}
	if err != nil {
		return nil, csvError(err)
	}
	if err := utf8Error(header, nil, headerLine(cr)); err != nil {
		err.Field = "header"
		return nil, err
	}
	for i := range header {
		header[i] = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(header[i], "\ufeff")))
	}
	p, err := newRowParser(header)
	if err != nil {
		return nil, &RowError{Line: headerLine(cr), Msg: err.Error()}
	}
	tr := &Trace{Name: name, Format: p.format}
	var errs []error
	ids := map[string]int{}
	var clock time.Duration // Gen-Parallel: submissions are intervals
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			errs = append(errs, csvError(err))
			var pe *csv.ParseError
			if !errors.As(err, &pe) || len(errs) >= maxRowErrors {
				break
			}
			continue
		}
		line, _ := cr.FieldPos(0)
		job, keep, rowErr := p.parse(rec, line, &clock)
		if rowErr != nil {
			errs = append(errs, rowErr)
			if len(errs) >= maxRowErrors {
				errs = append(errs, fmt.Errorf("stopped after %d errors", maxRowErrors))
				break
			}
			continue
		}
		if !keep {
			tr.Dropped++
			continue
		}
		if prev, dup := ids[job.ID]; dup {
			errs = append(errs, &RowError{Line: line, Column: p.col["job"] + 1, Field: "job",
				Msg: fmt.Sprintf("job %q is already on line %d", job.ID, prev)})
			continue
		}
		ids[job.ID] = line
		tr.Jobs = append(tr.Jobs, job)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// Steward traces may list jobs in any order; the simulation needs them
	// by submission (ties keep file order).
	slices.SortStableFunc(tr.Jobs, func(a, b Job) int {
		switch {
		case a.Submit < b.Submit:
			return -1
		case a.Submit > b.Submit:
			return 1
		}
		return 0
	})
	return tr, nil
}

func headerLine(cr *csv.Reader) int {
	line, _ := cr.FieldPos(0)
	return line
}

func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &RowError{Line: pe.Line, Msg: fmt.Sprintf("CSV syntax: %v (at byte %d of the line)", pe.Err, pe.Column)}
	}
	return err
}

// Columns of each format. Steward's optional columns may be left out of
// the header or left empty in a row.
var (
	stewardRequired = []string{"job", "submit", "gpus", "run_time"}
	stewardOptional = []string{"allocs", "user", "tenant", "tier", "idle_after", "model"}
	genParallelCols = []string{"u_id", "user", "gpu_num", "node_num", "interval", "run_time"}
)

type rowParser struct {
	format string
	col    map[string]int // column name -> index
	names  []string       // the header, by index
	width  int
}

func newRowParser(header []string) (*rowParser, error) {
	p := &rowParser{col: map[string]int{}, names: header, width: len(header)}
	for i, h := range header {
		if h == "" {
			continue
		}
		if _, dup := p.col[h]; dup {
			return nil, fmt.Errorf("header names column %q twice", h)
		}
		p.col[h] = i
	}
	has := func(names []string) bool {
		for _, n := range names {
			if _, ok := p.col[n]; !ok {
				return false
			}
		}
		return true
	}
	switch {
	case has(genParallelCols):
		p.format = FormatGenParallel
	case has(stewardRequired):
		p.format = FormatSteward
		known := append(slices.Clone(stewardRequired), stewardOptional...)
		for _, h := range header {
			if h != "" && !slices.Contains(known, h) {
				return nil, fmt.Errorf("unknown column %q (columns: %s)", h, strings.Join(known, ", "))
			}
		}
	default:
		var missing []string
		for _, n := range stewardRequired {
			if _, ok := p.col[n]; !ok {
				missing = append(missing, n)
			}
		}
		return nil, fmt.Errorf("header lacks column(s) %s: a Steward trace needs %s (optional: %s); "+
			"a Gen-Parallel trace needs %s", strings.Join(missing, ", "), strings.Join(stewardRequired, ", "),
			strings.Join(stewardOptional, ", "), strings.Join(genParallelCols, ", "))
	}
	return p, nil
}

// field returns a named column's value, "" when the column is absent.
func (p *rowParser) field(rec []string, name string) string {
	i, ok := p.col[name]
	if !ok || i >= len(rec) {
		return ""
	}
	return strings.TrimSpace(rec[i])
}

func (p *rowParser) errAt(line int, name, format string, args ...any) *RowError {
	return &RowError{Line: line, Column: p.col[name] + 1, Field: name, Msg: fmt.Sprintf(format, args...)}
}

// whole parses a whole number in [lo, hi].
func (p *rowParser) whole(rec []string, line int, name string, lo, hi int64) (int64, *RowError) {
	s := p.field(rec, name)
	if s == "" {
		return 0, p.errAt(line, name, "missing value")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, p.errAt(line, name, "not a whole number: %q", s)
	}
	if v < lo || v > hi {
		return 0, p.errAt(line, name, "%d is out of range [%d, %d]", v, lo, hi)
	}
	return v, nil
}

// gpuCount parses a GPU count: a whole number in [lo, 65536] ("2.0"
// included), or a fraction in (0, 1), a shared GPU (MIG, time slicing),
// which counts as one whole GPU since the model places whole GPUs; frac
// says it was one. Other fractions are errors: 1.5 GPUs is no shape a
// scheduler places.
func (p *rowParser) gpuCount(rec []string, line int, name string, lo int64) (n int64, frac bool, err *RowError) {
	s := p.field(rec, name)
	if _, e := strconv.ParseInt(s, 10, 64); e == nil || s == "" {
		n, err = p.whole(rec, line, name, lo, 1<<16)
		return n, false, err
	}
	v, e := strconv.ParseFloat(s, 64)
	switch {
	case e != nil || math.IsNaN(v) || math.IsInf(v, 0):
		return 0, false, p.errAt(line, name, "not a whole number: %q", s)
	case v > 0 && v < 1:
		return 1, true, nil
	case v != math.Trunc(v):
		return 0, false, p.errAt(line, name, "%s is not a whole number of GPUs (only a fraction below 1 is taken, as 1 GPU)", s)
	case v < float64(lo) || v > 1<<16:
		return 0, false, p.errAt(line, name, "%s is out of range [%d, %d]", s, lo, 1<<16)
	}
	return int64(v), false, nil
}

// maxSeconds bounds times in traces: 100 years, far from overflowing.
const maxSeconds = 100 * 365 * 24 * 3600

// seconds parses a non-negative number of seconds (decimals allowed).
func (p *rowParser) seconds(rec []string, line int, name string) (time.Duration, *RowError) {
	s := p.field(rec, name)
	if s == "" {
		return 0, p.errAt(line, name, "missing value")
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, p.errAt(line, name, "not a number of seconds: %q", s)
	}
	if v < 0 || v > maxSeconds {
		return 0, p.errAt(line, name, "%s seconds is out of range [0, %d]", s, maxSeconds)
	}
	return time.Duration(math.Round(v * float64(time.Second))), nil
}

// parse turns one record into a job; keep is false for rows that are no
// GPU job.
func (p *rowParser) parse(rec []string, line int, clock *time.Duration) (job Job, keep bool, err *RowError) {
	if err := utf8Error(rec, p.names, line); err != nil {
		return Job{}, false, err
	}
	if len(rec) != p.width {
		return Job{}, false, &RowError{Line: line, Msg: fmt.Sprintf("%d fields, but the header has %d", len(rec), p.width)}
	}
	if p.format == FormatGenParallel {
		return p.parseGenParallel(rec, line, clock)
	}
	return p.parseSteward(rec, line)
}

func (p *rowParser) parseSteward(rec []string, line int) (Job, bool, *RowError) {
	j := Job{Line: line, Allocs: 1, IdleAfter: IdleUnset}
	if j.ID = p.field(rec, "job"); j.ID == "" {
		return j, false, p.errAt(line, "job", "missing value")
	}
	var err *RowError
	if j.Submit, err = p.seconds(rec, line, "submit"); err != nil {
		return j, false, err
	}
	gpus, frac, err := p.gpuCount(rec, line, "gpus", 1)
	if err != nil {
		return j, false, err
	}
	j.GPUs, j.FractionalGPU = int(gpus), frac
	if p.field(rec, "allocs") != "" {
		n, err := p.whole(rec, line, "allocs", 1, 1<<16)
		if err != nil {
			return j, false, err
		}
		j.Allocs = int(n)
	}
	if j.RunTime, err = p.seconds(rec, line, "run_time"); err != nil {
		return j, false, err
	}
	if j.RunTime <= 0 {
		return j, false, p.errAt(line, "run_time", "must be more than 0 seconds")
	}
	j.User = p.field(rec, "user")
	j.Tenant = p.field(rec, "tenant")
	j.Tier = p.field(rec, "tier")
	j.Model = p.field(rec, "model")
	switch s := p.field(rec, "idle_after"); s {
	case "":
	case "never":
		j.IdleAfter = NeverIdle
	default:
		if j.IdleAfter, err = p.seconds(rec, line, "idle_after"); err != nil {
			err.Msg += ` (or "never", or empty to derive it)`
			return j, false, err
		}
	}
	return j, true, nil
}

func (p *rowParser) parseGenParallel(rec []string, line int, clock *time.Duration) (Job, bool, *RowError) {
	j := Job{Line: line, IdleAfter: IdleUnset}
	if j.ID = p.field(rec, "u_id"); j.ID == "" {
		return j, false, p.errAt(line, "u_id", "missing value")
	}
	j.User = p.field(rec, "user")
	interval, err := p.seconds(rec, line, "interval")
	if err != nil {
		return j, false, err
	}
	*clock += interval
	if *clock > maxSeconds*time.Second {
		return j, false, p.errAt(line, "interval", "submissions run past %d seconds", maxSeconds)
	}
	j.Submit = *clock
	gpus, frac, err := p.gpuCount(rec, line, "gpu_num", 0)
	if err != nil {
		return j, false, err
	}
	j.FractionalGPU = frac
	nodes, err := p.whole(rec, line, "node_num", 1, 1<<16)
	if err != nil {
		return j, false, err
	}
	if j.RunTime, err = p.seconds(rec, line, "run_time"); err != nil {
		return j, false, err
	}
	if gpus == 0 || j.RunTime <= 0 {
		return j, false, nil // a CPU-only (or empty) job: nothing for a GPU scheduler
	}
	// One allocation per node the job spanned, GPUs split evenly (rounded
	// up when they do not divide; both shared traces always divide).
	nodes = min(nodes, gpus)
	j.Allocs = int(nodes)
	j.GPUs = int((gpus + nodes - 1) / nodes)
	return j, true, nil
}

// SharedTraces maps the short names of the public traces to their files in
// the shared traces directory (see its SOURCES.md).
var SharedTraces = map[string]string{
	"philly": "philly_data_training.csv",
	"helios": "helios_data_training.csv",
}

// DefaultTracesDir is where the shared traces live relative to the
// repository root: a clone has the shared directory next to it.
const DefaultTracesDir = "../shared/traces"

// ResolveTrace turns a -trace argument into a file: an existing path as
// is, else a shared trace's short name or file name in dir.
func ResolveTrace(arg, dir string) (string, error) {
	if info, err := os.Stat(arg); err == nil && !info.IsDir() {
		return arg, nil
	}
	name := arg
	if file, ok := SharedTraces[strings.ToLower(arg)]; ok {
		name = file
	}
	if !strings.ContainsRune(arg, os.PathSeparator) {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
		return "", fmt.Errorf("trace %q: no such file, and %s does not exist (shared traces: philly, helios, looked up in %s)",
			arg, path, dir)
	}
	return "", fmt.Errorf("trace %q: no such file", arg)
}
