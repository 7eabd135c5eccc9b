package bench

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// stepColors give each phase a colour; its baseline is drawn dashed in the same colour, so that
// each phase sits beside the plain batch it is compared with.
var stepColors = map[string]color.RGBA{
	PhasePlain:  {R: 0x33, G: 0x33, B: 0x33, A: 0xff},
	PhaseClaims: {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	PhaseAttach: {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// WritePlot draws objects done over time, one line per step, as a PNG.
func (rep *Report) WritePlot(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("bench-e2e: objects done over time, n=%d (%s)", rep.Config.N, rep.Date.Format("2006-01-02"))
	p.X.Label.Text = "seconds since the step's first create"
	p.Y.Label.Text = "objects done"
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
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
		phase := s.Kind
		label := s.Name
		if s.Name != s.Kind && s.Kind == PhasePlain {
			phase = s.Name[len("baseline-"):]
			label = "plain before " + phase
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		line.Color = stepColors[phase]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s (%.1f s)", label, s.Seconds), line)
	}
	p.Legend.Padding = vg.Points(4)
	p.Legend.ThumbnailWidth = vg.Points(24)
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}
