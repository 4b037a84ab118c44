package chaos

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// RegInput is a register operation: Set(Value) or Get.
type RegInput struct {
	Set   bool
	Value uint32
}

// RegOutput is a Get's answer.
type RegOutput struct {
	Value   uint32
	Version uint64
	// Unknown: a Set whose outcome is unknown (error or timeout).
	Unknown bool
}

// RegOp is one register operation with its node and wall times.
type RegOp struct {
	Client int
	Node   string
	// Leader: a Get answered by a node that reported itself Leader in
	// the same term right before and right after the call (only those
	// enter the linearizability check).
	Leader     bool
	In         RegInput
	Out        RegOutput
	Call, Ret  time.Time
	Failed     bool
	FailReason string
}

func (w *Workload) regSetter(ctx context.Context, client int) {
	defer w.wg.Done()
	for ctx.Err() == nil {
		n := w.pickUp()
		if n == nil {
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return
			}
			continue
		}
		v := w.regNext.Add(1)
		p := proto.Clone(w.base).(*pb.CachePolicy)
		p.SloTightThresholdMs = v
		op := RegOp{Client: client, Node: n.ID, In: RegInput{Set: true, Value: v}, Call: time.Now()}
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		got, err := n.IC.SetCachePolicy(cctx, &pb.SetCachePolicyRequest{Policy: p})
		cancel()
		op.Ret = time.Now()
		if err != nil {
			op.Failed, op.FailReason = true, err.Error()
			// INVALID_ARGUMENT would mean nothing was committed; every
			// other failure leaves the outcome unknown.
			op.Out.Unknown = status.Code(err) != codes.InvalidArgument
		} else {
			op.Out = RegOutput{Value: got.SloTightThresholdMs, Version: got.Version}
		}
		w.mu.Lock()
		w.regOps = append(w.regOps, op)
		w.mu.Unlock()
		if !sleepCtx(ctx, w.RegPause) {
			return
		}
	}
}

func (w *Workload) regGetter(ctx context.Context, client int) {
	defer w.wg.Done()
	for i := 0; ctx.Err() == nil; i++ {
		// Every other read goes to the believed leader (confirmed ones form the
		// linearizable history); the rest go to any node (local reads:
		// contract §8.4 lets them be stale, checked for no phantom values and
		// per-process monotonic versions).
		var n *Node
		leader := false
		if h := int(w.leaderHint.Load()); i%2 == 0 && h >= 0 {
			if s, _ := w.c.Nodes[h].State(); s == Up {
				n, leader = w.c.Nodes[h], true
			}
		}
		if n == nil {
			n = w.pickUp()
		}
		if n == nil {
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return
			}
			continue
		}
		_, gen := n.State()
		// A leader read counts as one only when the node reports itself
		// Leader in the same term right before and right after the read
		// (the hint alone may be stale: the leader may have been killed,
		// restarted or cut off since the poller saw it).
		var term uint64
		if leader {
			st, err := w.c.Status(ctx, n)
			leader = err == nil && st.State == "Leader"
			if leader {
				term = st.Term
			}
		}
		op := RegOp{Client: client, Node: fmt.Sprintf("%s#%d", n.ID, gen), In: RegInput{}, Call: time.Now()}
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		got, err := n.IC.GetCachePolicy(cctx, &pb.GetCachePolicyRequest{})
		cancel()
		op.Ret = time.Now()
		if leader {
			st, err := w.c.Status(ctx, n)
			op.Leader = err == nil && st.State == "Leader" && st.Term == term
		}
		if err != nil {
			op.Failed, op.FailReason = true, err.Error()
		} else {
			op.Out = RegOutput{Value: got.SloTightThresholdMs, Version: got.Version}
		}
		w.mu.Lock()
		w.regOps = append(w.regOps, op)
		w.mu.Unlock()
		if !sleepCtx(ctx, w.RegPause) {
			return
		}
	}
}

// History returns copies of the recorded writes, lookups and register
// operations.
func (w *Workload) History() ([]*WriteRec, []LookupRec, []RegOp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*WriteRec(nil), w.writes...), append([]LookupRec(nil), w.lookups...), append([]RegOp(nil), w.regOps...)
}

// porcupineOps converts the register history for porcupine: every Set
// (unknown outcomes stay open to the end of the history unless no read
// ever saw their value, in which case they are dropped: an unobserved
// write of a unique value can always be linearized last) and the Gets
// answered by a confirmed leader. Failed Gets are dropped (a read with no
// answer constrains nothing).
func porcupineOps(ops []RegOp, t0 time.Time) []porcupine.Operation {
	seen := map[uint32]bool{}
	for _, op := range ops {
		if !op.In.Set && !op.Failed {
			seen[op.Out.Value] = true
		}
	}
	var out []porcupine.Operation
	for _, op := range ops {
		if op.Failed && !op.In.Set {
			continue
		}
		if !op.In.Set && !op.Leader {
			continue
		}
		ret := op.Ret.Sub(t0).Nanoseconds()
		if op.In.Set && op.Out.Unknown {
			if !seen[op.In.Value] {
				continue
			}
			ret = math.MaxInt64
		} else if op.In.Set && op.Failed {
			continue // definitely not applied
		}
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: op.In, Call: op.Call.Sub(t0).Nanoseconds(),
			Output: op.Out, Return: ret, Metadata: op.Node})
	}
	return out
}

// RegisterModel is the porcupine model of the policy register: the state
// is the value of sloTightThresholdMs; Set always succeeds, Get must
// return the state.
func RegisterModel(initial uint32) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return initial },
		Step: func(state, input, output any) (bool, any) {
			in := input.(RegInput)
			if in.Set {
				return true, in.Value
			}
			return output.(RegOutput).Value == state.(uint32), state
		},
		Equal: func(a, b any) bool { return a.(uint32) == b.(uint32) },
		DescribeOperation: func(input, output any) string {
			in := input.(RegInput)
			if in.Set {
				if output.(RegOutput).Unknown {
					return fmt.Sprintf("set(%d) → ?", in.Value)
				}
				return fmt.Sprintf("set(%d)", in.Value)
			}
			o := output.(RegOutput)
			return fmt.Sprintf("get() → %d (v%d)", o.Value, o.Version)
		},
		DescribeState:             func(s any) string { return fmt.Sprint(s) },
		DescribeOperationMetadata: func(m any) string { return fmt.Sprint(m) },
	}
}
