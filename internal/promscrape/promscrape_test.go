package promscrape

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A scrape sums the families' samples by label, as written by hand in the
// exposition below; an absent family is 0, a failing endpoint an error.
func TestGetSumByLabel(t *testing.T) {
	const text = `# TYPE picks counter
picks{reason="LOAD",node="a"} 3
picks{reason="LOAD",node="b"} 4
picks{reason="PREFIX_MATCH",node="a"} 5
# TYPE running gauge
running 2.5
untyped_thing 7
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte(text))
	}))
	defer srv.Close()
	fams, err := Get(context.Background(), srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want []string
		sum  float64
	}{
		{"picks", nil, 12},
		{"picks", []string{"reason", "LOAD"}, 7},
		{"picks", []string{"reason", "LOAD", "node", "b"}, 4},
		{"picks", []string{"reason", "NONE"}, 0},
		{"running", nil, 2.5},
		{"untyped_thing", nil, 7},
		{"absent", nil, 0},
	} {
		if got := Sum(fams, c.name, c.want...); got != c.sum {
			t.Errorf("Sum(%s, %v) = %v, want %v", c.name, c.want, got, c.sum)
		}
	}
	by := ByLabel(fams, "picks", "reason")
	if len(by) != 2 || by["LOAD"] != 7 || by["PREFIX_MATCH"] != 5 {
		t.Errorf("ByLabel = %v, want LOAD 7, PREFIX_MATCH 5", by)
	}
	if len(ByLabel(fams, "absent", "reason")) != 0 {
		t.Error("an absent family has labels")
	}
	if _, err := Get(context.Background(), srv.URL+"/other"); err == nil {
		t.Error("a 404 scraped without error")
	}
}
