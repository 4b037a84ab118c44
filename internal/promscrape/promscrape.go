// Package promscrape reads a Prometheus text endpoint (/metrics of a
// proxy, a sim engine or a node) and sums its families, for the local
// fleets' live lines (dev) and measurements (bench --live).
package promscrape

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeTimeout bounds one scrape; bodyLimit the bytes read of one.
const (
	scrapeTimeout = 2 * time.Second
	bodyLimit     = 16 << 20
)

// Get reads the Prometheus text at url (within 2 s, at most 16 MiB) into
// its families by name. It errors when the endpoint cannot be reached,
// answers other than 200, or the text does not parse.
func Get(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(io.LimitReader(resp.Body, bodyLimit))
}

// Sum is the sum of family name's counters, gauges or untyped values
// whose labels include every pair of want (label, value, label, value,
// …); 0 when the family is absent.
func Sum(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

// hasLabels reports whether m carries every (label, value) pair of want.
func hasLabels(m *dto.Metric, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == want[i] && l.GetValue() == want[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// ByLabel sums family name's counters by the value of label; empty when
// the family is absent.
func ByLabel(fams map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	out := map[string]float64{}
	f := fams[name]
	if f == nil {
		return out
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}
