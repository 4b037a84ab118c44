package loadgen

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteComparison prints two summaries side by side, one column each,
// headed by names (e.g. the two targets of `loadgen --compare`), then the
// first's cache hit rate and TTFT p50 as multiples of the second's
// (loadgen --compare, contract §12.8). A ratio
// over a zero is printed as "-".
func WriteComparison(w io.Writer, names [2]string, s [2]Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label string, f func(*Summary) string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", label, f(&s[0]), f(&s[1]))
	}
	fmt.Fprintf(tw, "\t%s\t%s\n", names[0], names[1])
	row("requests ok / failed", func(x *Summary) string { return fmt.Sprintf("%d / %d", x.OK, x.Failed) })
	row("TTFT p50 / p99", func(x *Summary) string { return MsText(x.TTFT.P50) + " / " + MsText(x.TTFT.P99) })
	row("E2E p50 / p99", func(x *Summary) string { return MsText(x.E2E.P50) + " / " + MsText(x.E2E.P99) })
	row("engines' cached tokens", func(x *Summary) string { return fmt.Sprintf("%.1f %%", 100*x.CacheHitRate) })
	row("routed hit rate", func(x *Summary) string { return fmt.Sprintf("%.1f %%", 100*x.HitRate) })
	row("requests max/mean", func(x *Summary) string { return fmt.Sprintf("%.2f", x.MaxOverMean) })
	row("picks", func(x *Summary) string {
		if len(x.Reasons) == 0 {
			return "-"
		}
		return countText(x.Reasons)
	})
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "first against second: engines' cached tokens %s, TTFT p50 %s\n",
		ratioText(s[0].CacheHitRate, s[1].CacheHitRate), ratioText(s[0].TTFT.P50, s[1].TTFT.P50))
	return err
}

// ratioText is a/b as "2.45×", or "-" when b is 0.
func ratioText(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}
