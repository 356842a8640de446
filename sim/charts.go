package sim

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Chart colours, one per policy, the same in every chart.
var policyColors = map[string]color.RGBA{
	string(FIFO):    {R: 0x88, G: 0x88, B: 0x88, A: 0xff},
	string(Strict):  {R: 0xe6, G: 0x7e, B: 0x22, A: 0xff},
	string(Steward): {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
}

// minPlottedDelay is where delays of (almost) nothing are drawn on the
// log-scale delay axis: 0.1 minute, six seconds.
const minPlottedDelay = 0.1

// cdfPoints bounds the points of one CDF line.
const cdfPoints = 400

// WriteCharts draws a report's charts into dir as PNG files and returns
// their paths: queueing-delay CDFs by tier (one panel a tier, one line a
// policy) and utilisation over time (one panel a policy).
func WriteCharts(rep *Report, dir string) ([]string, error) {
	if len(rep.Results) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("charts for %s: %w", rep.Trace, err)
	}
	var out []string
	path := filepath.Join(dir, rep.Trace+"-delay-cdf.png")
	if err := writeDelayCDFs(rep, path); err != nil {
		return nil, fmt.Errorf("charts for %s: %w", rep.Trace, err)
	}
	out = append(out, path)
	path = filepath.Join(dir, rep.Trace+"-utilisation.png")
	if err := writeUtilisation(rep, path); err != nil {
		return nil, fmt.Errorf("charts for %s: %w", rep.Trace, err)
	}
	return append(out, path), nil
}

func writeDelayCDFs(rep *Report, path string) error {
	tiers := rep.Results[0].DelayByTier
	cols := 2
	rows := (len(tiers) + cols - 1) / cols
	if len(tiers) == 1 {
		cols = 1
	}
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for ti, tier := range tiers {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s (priority %d): %s", tier.Tier, tier.Priority, rep.Trace)
		p.X.Label.Text = "queueing delay, minutes (log scale)"
		p.Y.Label.Text = "share of jobs started"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min, p.Y.Max = 0, 1
		p.Legend.Top = false
		p.Legend.Left = false
		p.Add(plotter.NewGrid())
		maxX := minPlottedDelay * 10
		for _, r := range rep.Results {
			d := r.delays[tier.Tier]
			if len(d) == 0 {
				continue
			}
			pts := cdf(d)
			maxX = math.Max(maxX, pts[len(pts)-1].X)
			line, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			line.Color = policyColors[r.Policy]
			line.Width = vg.Points(1.5)
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("%s (n=%d)", r.Policy, len(d)), line)
		}
		p.X.Min, p.X.Max = minPlottedDelay, maxX*1.2
		grid[ti/cols][ti%cols] = p
	}
	for i := range grid {
		for j := range grid[i] {
			if grid[i][j] == nil {
				grid[i][j] = plot.New()
				grid[i][j].HideAxes()
			}
		}
	}
	return saveGrid(grid, vg.Points(float64(cols)*380), vg.Points(float64(rows)*300), path)
}

// cdf turns sorted delays into at most cdfPoints points of the empirical
// CDF, delays under minPlottedDelay drawn at it.
func cdf(sorted []float64) plotter.XYs {
	n := len(sorted)
	step := max(1, n/cdfPoints)
	pts := make(plotter.XYs, 0, n/step+2)
	for i := 0; i < n; i += step {
		pts = append(pts, plotter.XY{X: math.Max(sorted[i], minPlottedDelay), Y: float64(i+1) / float64(n)})
	}
	pts = append(pts, plotter.XY{X: math.Max(sorted[n-1], minPlottedDelay), Y: 1})
	return pts
}

func writeUtilisation(rep *Report, path string) error {
	grid := make([][]*plot.Plot, len(rep.Results))
	for i, r := range rep.Results {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s: GPU utilisation over time, %s", r.Policy, rep.Trace)
		p.X.Label.Text = "hours since the first submission"
		p.Y.Label.Text = "share of GPUs"
		p.Y.Min, p.Y.Max = 0, 1.05
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
		alloc := make(plotter.XYs, len(r.Series))
		busy := make(plotter.XYs, len(r.Series))
		for k, pt := range r.Series {
			alloc[k] = plotter.XY{X: pt.Hour, Y: pt.Allocated}
			busy[k] = plotter.XY{X: pt.Hour, Y: pt.Busy}
		}
		if len(r.Series) > 0 {
			la, err := plotter.NewLine(alloc)
			if err != nil {
				return err
			}
			la.Color = policyColors[r.Policy]
			la.Width = vg.Points(1.2)
			lb, err := plotter.NewLine(busy)
			if err != nil {
				return err
			}
			lb.Color = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
			lb.Width = vg.Points(1)
			lb.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
			p.Add(la, lb)
			p.Legend.Add("allocated", la)
			p.Legend.Add("busy (idleness overlaid)", lb)
		}
		grid[i] = []*plot.Plot{p}
	}
	return saveGrid(grid, vg.Points(760), vg.Points(float64(len(grid))*220), path)
}

// saveGrid draws plots in a grid onto one PNG.
func saveGrid(grid [][]*plot.Plot, w, h vg.Length, path string) error {
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(grid), Cols: len(grid[0]), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j := range grid[i] {
			grid[i][j].Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
