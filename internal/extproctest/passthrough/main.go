// Command passthrough serves extproctest.PassThrough on a TCP address:
// the baseline ext_proc server of the picker benchmark (e2e
// TestPickerBench).
//
//	passthrough 127.0.0.1:9102 10.0.0.1:8000
package main

import (
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/inference-cache/inference-cache/internal/extproctest"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: passthrough LISTEN DESTINATION")
		os.Exit(2)
	}
	lis, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	g := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(g, &extproctest.PassThrough{Destination: os.Args[2]})
	fmt.Fprintln(os.Stderr, "passthrough serving", lis.Addr())
	if err := g.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
