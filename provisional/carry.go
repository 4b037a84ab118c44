package provisional

import (
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/pickerload"
)

// ApplyCarrying applies a picks push as a node takes it (req, push its
// converted form, FromPB): the push (ApplyThen), then the load report it
// carries, if any (pickerload.FromPush), held in loads and aged as the
// push (contract §5.13), so a lookup that reads the load reads the picks
// that explain it. A load report that breaks a rule refuses the whole
// push before anything is applied (err, a *pickerload.FieldError naming
// the field under "load."); picks refused for a full store still leave
// the load held, since it is true either way. A valid report the load
// store refuses (no room) is loadErr, and the push stands: the picks do
// not depend on it. res and err are Apply's otherwise. The one sequence
// every node, and a simulation of one, runs.
func (s *Store) ApplyCarrying(req *pb.SharePicksRequest, push Push, loads *pickerload.Store) (res Result, loadErr, err error) {
	load, err := pickerload.FromPush(req)
	if err != nil {
		return Result{}, nil, err
	}
	if load == nil {
		res, err = s.Apply(push)
		return res, nil, err
	}
	res, err = s.ApplyThen(push, func() {
		load.Age = push.Age
		_, loadErr = loads.Put(*load)
	})
	return res, loadErr, err
}
