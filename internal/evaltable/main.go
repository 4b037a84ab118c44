// Command evaltable turns the --json reports of `inference-cache bench`
// runs into the tables of EVALUATION.md: one table per run (trace, prefill
// speed, gateways) with every strategy's hit rate, fraction of ideal,
// max/mean requests and modelled TTFT p50/p90/p99/mean, then a summary
// of the lookuproute-sdk targets per run, each marked met or missed (with
// several gateways also its p50 against its own one-gateway p50 on the
// same trace and prefill speed). The rules are internal/evaltargets'.
//
//	go run ./internal/evaltable [-strategy lookuproute-sdk] .eval/*.json
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/internal/evaltargets"
)

func main() {
	underTest := flag.String("strategy", bench.StrategyLookupRouteSDK, "the strategy under test: its targets are checked and its rows bold")
	flag.Parse()
	if flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: evaltable [-strategy NAME] REPORT.json ...")
		os.Exit(2)
	}
	reps, err := evaltargets.ReadReports(flag.Args())
	if err == nil {
		err = evaltargets.Write(os.Stdout, reps, *underTest)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "evaltable:", err)
		os.Exit(1)
	}
}
