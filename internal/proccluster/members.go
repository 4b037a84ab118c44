package proccluster

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// DialMembers dials every node's gRPC address (ns[i].GRPC, without TLS,
// as the local clusters of dev and bench --live run) for the waits;
// closeAll releases the connections. It errors, naming the node, when an
// address cannot be dialled, with nothing left open.
func DialMembers(ns []Node) (ms []Member, closeAll func(), err error) {
	var conns []*grpc.ClientConn
	closeAll = func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for _, n := range ns {
		cc, err := grpc.NewClient(n.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("dial %s at %s: %w", n.ID, n.GRPC, err)
		}
		conns = append(conns, cc)
		ms = append(ms, Member{Name: n.ID, Conn: cc})
	}
	return ms, closeAll, nil
}
