package index

import "testing"

func TestSmoke(t *testing.T) {
	ix := New(testPolicy())
	ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2, 3), stored("b", vllm, t0, 1, 2)})
	r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, NowMs: t0})
	t.Logf("%+v", r)
	if r.Reason != PrefixMatch || r.Hints[0].ReplicaID != "a" {
		t.Fatalf("got %+v", r)
	}
	v := ix.View()
	b := NewBuilder(testPolicy())
	if err := v.Blocks(func(r BlockRecord) error { return b.AddBlock(r) }); err != nil {
		t.Fatal(err)
	}
	ix2 := b.Build()
	if ix2.Digest() != ix.Digest() {
		t.Fatal("digest")
	}
	v.Release()
	t.Log(ix.Sizes(), ix.Expire(t0+2000*1000), ix.Sizes())
}
