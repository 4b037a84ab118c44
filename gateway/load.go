package gateway

import pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"

// PickerLoad is what this gateway's picker has in flight per replica, as
// a load report lists it (contract §5.11; client.Picker.InFlight): for a
// caller that carries the reports itself (the bench's model of the
// cluster's shared state on a virtual clock) instead of Config.ShareLoad.
// Empty for round-robin and least-loaded, which do not use the picker.
func (g *Gateway) PickerLoad() []*pb.PickerReplicaLoad { return g.picker.InFlight() }

// ProvisionalPickerID is the picker id of the gateway's own picks in its
// local table (ProvisionalTable().Live takes it): PickerID when it shares
// its load, else the id it made for its picks; "" when the table is off.
func (g *Gateway) ProvisionalPickerID() string { return g.prov.id }
