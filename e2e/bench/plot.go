package bench

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// stepColors give each phase a colour; its baselines are drawn in the same colour, dashed
// (dotted when their Services pin their IPs), so that each phase sits beside the plain batches
// it is compared with.
var stepColors = map[string]color.RGBA{
	PhasePlain:  {R: 0x33, G: 0x33, B: 0x33, A: 0xff},
	PhaseClaims: {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	PhaseAttach: {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// WritePlot draws objects done over time, one line per step (every round of it), as a PNG;
// the legend has one entry per step name, with its median time over the rounds.
func (rep *Report) WritePlot(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("bench-e2e: objects done over time, n=%d (%s)", rep.Config.N, rep.Date.Format("2006-01-02"))
	if rounds := rep.Config.Rounds; rounds > 1 {
		p.Title.Text += fmt.Sprintf(", %d rounds", rounds)
	}
	p.X.Label.Text = "seconds since the step's first create"
	p.Y.Label.Text = "objects done"
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	times := map[string][]float64{}
	for _, s := range rep.Steps {
		times[s.Name] = append(times[s.Name], s.Seconds)
	}
	legend := map[string]bool{}
	for _, s := range rep.Steps {
		pts := make(plotter.XYs, len(s.Series))
		for i, pt := range s.Series {
			pts[i].X, pts[i].Y = pt.T, float64(pt.Done)
		}
		if len(pts) < 2 {
			continue
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		phase, label := s.Name, s.Name
		if of, pinned, ok := baselineOf(s.Name); ok {
			phase, label = of, "plain before "+of
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			if pinned {
				label = "plain, pinned, before " + of
				line.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			}
		}
		line.Color = stepColors[phase]
		line.Width = vg.Points(1.5)
		p.Add(line)
		if legend[s.Name] {
			continue
		}
		legend[s.Name] = true
		if n := len(times[s.Name]); n > 1 {
			p.Legend.Add(fmt.Sprintf("%s (%d rounds, median %.1f s)", label, n, median(times[s.Name])), line)
		} else {
			p.Legend.Add(fmt.Sprintf("%s (%.1f s)", label, s.Seconds), line)
		}
	}
	p.Legend.Padding = vg.Points(4)
	p.Legend.ThumbnailWidth = vg.Points(24)
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}
