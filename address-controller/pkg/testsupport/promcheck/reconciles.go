package promcheck

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Reconciles is how many reconciles the named controller has finished (every result) according
// to controller-runtime's controller_runtime_reconcile_total in g: the count the controllers'
// integration suites compare with the objects a change concerned.
func Reconciles(g prometheus.Gatherer, controller string) (int, error) {
	families, err := g.Gather()
	if err != nil {
		return 0, err
	}
	total := 0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					total += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return total, nil
}
