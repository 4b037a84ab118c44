package bench

import (
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/provisional"
)

// softNode is the nodes' soft state behind the bench's api.Service
// (api.PickerLoad, api.Provisional): the shared state's stores, which
// stand for every node at once, so nothing is passed on. Pushes and
// reports are applied as a node applies them (pickerload.Store.Put,
// provisional.Store.ApplyCarrying); the service adds its own checks and
// ends the turns they settle, after them.
type softNode struct{ s *sharedState }

func (n softNode) SharePickerLoad(req *pb.ReportPickerLoadRequest) (pickerload.Outcome, error) {
	return n.s.load.Put(pickerload.FromPB(req))
}

func (n softNode) PickerLoadView() pickerload.View { return n.s.load.At() }

func (n softNode) SharePicks(req *pb.SharePicksRequest) (provisional.Result, error) {
	res, _, err := n.s.picks.ApplyCarrying(req, provisional.FromPB(req), n.s.load)
	return res, err
}

func (n softNode) Provisional() *provisional.Store { return n.s.picks }
