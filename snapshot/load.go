package snapshot

import (
	"encoding/binary"
	"fmt"
	"io"

	"go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
)

// load feeds every record of the verified snapshot in tx to b and checks
// the counts against meta m.
func load(tx *bbolt.Tx, m Meta, b Builder) error {
	parts, err := readPartitions(tx)
	if err != nil {
		return err
	}
	repls, err := readReplicas(tx)
	if err != nil {
		return err
	}
	d := &chunkDecoder{
		tx: tx, parts: parts, repls: repls,
		out: make(chan *loadBatch, 2), free: make(chan *loadBatch, 3), stop: make(chan struct{}),
	}
	go d.run()
	blocks, residencies, err := d.feed(b)
	if err != nil {
		return err
	}
	if d.chunkNo != m.Chunks {
		return fmt.Errorf("%w: blocks bucket has %d chunks, meta says %d", ErrCorrupt, d.chunkNo, m.Chunks)
	}
	if blocks != m.Sizes.Blocks || residencies != m.Sizes.Residencies {
		return fmt.Errorf("%w: blocks bucket holds %d blocks / %d residencies, meta says %d / %d", ErrCorrupt, blocks, residencies, m.Sizes.Blocks, m.Sizes.Residencies)
	}
	return loadStats(tx, b)
}

// readPartitions reads the partition table, numbered from 0 in key order.
func readPartitions(tx *bbolt.Tx) ([]index.Partition, error) {
	var parts []index.Partition
	c := tx.Bucket(bucketPartitions).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 4 || binary.BigEndian.Uint32(k) != uint32(len(parts)) {
			return nil, fmt.Errorf("%w: partitions key %x out of sequence", ErrCorrupt, k)
		}
		var s [4]string
		for i := range s {
			n, w := binary.Uvarint(v)
			if w <= 0 || uint64(len(v)-w) < n {
				return nil, fmt.Errorf("%w: partitions record %d field %d", ErrCorrupt, len(parts), i)
			}
			s[i] = string(v[w : w+int(n)])
			v = v[w+int(n):]
		}
		parts = append(parts, index.Partition{Scheme: s[0], Model: s[1], Tenant: s[2], Adapter: s[3]})
	}
	return parts, nil
}

// readReplicas reads the replica id table, numbered from 0 in key order.
func readReplicas(tx *bbolt.Tx) ([]string, error) {
	var repls []string
	c := tx.Bucket(bucketReplicas).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 4 || binary.BigEndian.Uint32(k) != uint32(len(repls)) {
			return nil, fmt.Errorf("%w: replicas key %x out of sequence", ErrCorrupt, k)
		}
		repls = append(repls, string(v))
	}
	return repls, nil
}

// loadStats feeds every replica stats record to b.
func loadStats(tx *bbolt.Tx, b Builder) error {
	c := tx.Bucket(bucketStats).Cursor()
	i := 0
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var s fsmpb.ReplicaStats
		if err := proto.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("%w: stats record %d: %v", ErrCorrupt, i, err)
		}
		if err := b.AddStats(fsmpb.StatsFromPB(&s)); err != nil {
			return fmt.Errorf("%w: stats record %d: %v", ErrCorrupt, i, err)
		}
		i++
	}
	return nil
}

// loadBatch is one blocks chunk decoded into records.
type loadBatch struct {
	recs  []index.BlockRecord
	ends  []int // Residents of recs[i] is res[ends[i-1]:ends[i]]
	res   []index.Residency
	chunk uint64
	err   error
}

// chunkDecoder walks the blocks bucket on its own goroutine (run) and
// decodes whole chunks into record batches while the loading goroutine
// feeds the builder (feed; the index's insert is single-threaded); the
// two overlap. The decoder owns the blocks cursor; the read transaction
// stays open until both end.
type chunkDecoder struct {
	tx      *bbolt.Tx
	parts   []index.Partition
	repls   []string
	out     chan *loadBatch // closed when run returns
	free    chan *loadBatch // batches fed, for reuse
	stop    chan struct{}   // closed by feed at its first error
	chunkNo uint64          // chunks decoded whole; read after out closes
}

// run decodes chunk after chunk onto out until the last chunk, the first
// bad one, or stop.
func (d *chunkDecoder) run() {
	defer close(d.out)
	defer faultGuard()()
	defer func() { // a fault here would otherwise kill the process (guard.go)
		if r := recover(); r != nil {
			select {
			case d.out <- &loadBatch{err: fmt.Errorf("%w: malformed bbolt file: %v", ErrCorrupt, r)}:
			case <-d.stop:
			}
		}
	}()
	c := d.tx.Bucket(bucketBlocks).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var bt *loadBatch
		select {
		case bt = <-d.free:
			bt.recs, bt.ends, bt.res, bt.err = bt.recs[:0], bt.ends[:0], bt.res[:0], nil
		default:
			bt = &loadBatch{}
		}
		bt.chunk = d.chunkNo
		if len(k) != 8 || binary.BigEndian.Uint64(k) != d.chunkNo {
			bt.err = fmt.Errorf("%w: blocks key %x out of sequence (want chunk %d)", ErrCorrupt, k, d.chunkNo)
			d.send(bt)
			return
		}
		d.decodeChunk(bt, v)
		// records decoded before an error are still added, as the
		// sequential loader did, then the error is reported
		if !d.send(bt) || bt.err != nil {
			return
		}
		d.chunkNo++
	}
}

// send hands bt to the feeder, or reports false once it stopped.
func (d *chunkDecoder) send(bt *loadBatch) bool {
	select {
	case d.out <- bt:
		return true
	case <-d.stop:
		return false
	}
}

// decodeChunk decodes chunk v into bt, up to its first bad record (then
// bt.err says where).
func (d *chunkDecoder) decodeChunk(bt *loadBatch, v []byte) {
	dec := decoder{b: v}
	nrec := dec.uvarint()
	for i := uint64(0); i < nrec && dec.err == nil; i++ {
		var r index.BlockRecord
		pi := dec.uvarint()
		r.Hash = dec.u64()
		r.Tokens = uint32(dec.uvarint())
		r.CumTokens = uint32(dec.uvarint())
		r.Access = dec.uvarint()
		nres := dec.uvarint()
		if dec.err != nil || pi >= uint64(len(d.parts)) || nres > uint64(len(dec.b)) {
			bt.err = fmt.Errorf("%w: blocks chunk %d record %d does not decode", ErrCorrupt, d.chunkNo, i)
			return
		}
		r.Partition = d.parts[pi]
		for j := uint64(0); j < nres; j++ {
			ri := dec.uvarint()
			ls := dec.varint()
			if dec.err != nil || ri >= uint64(len(d.repls)) {
				bt.err = fmt.Errorf("%w: blocks chunk %d record %d resident %d does not decode", ErrCorrupt, d.chunkNo, i, j)
				return
			}
			bt.res = append(bt.res, index.Residency{ReplicaID: d.repls[ri], LastSeenMs: ls})
		}
		bt.recs = append(bt.recs, r)
		bt.ends = append(bt.ends, len(bt.res))
	}
	if dec.err != nil || len(dec.b) != 0 {
		bt.err = fmt.Errorf("%w: blocks chunk %d has trailing or short data", ErrCorrupt, d.chunkNo)
	}
}

// feed adds the decoded records to b, batch by batch, until the decoder
// closes out; at the first error it stops the decoder and drains out. It
// returns how many blocks and residencies it added.
func (d *chunkDecoder) feed(b Builder) (blocks, residencies int, lerr error) {
	for bt := range d.out {
		if lerr != nil {
			continue
		}
		start := 0
		for i := range bt.recs {
			r := bt.recs[i]
			r.Residents = bt.res[start:bt.ends[i]:bt.ends[i]]
			start = bt.ends[i]
			if err := b.AddBlock(r); err != nil {
				lerr = fmt.Errorf("%w: blocks chunk %d record %d: %v", ErrCorrupt, bt.chunk, i, err)
				break
			}
			residencies += len(r.Residents)
			blocks++
		}
		if lerr == nil && bt.err != nil {
			lerr = bt.err
		}
		if lerr != nil {
			close(d.stop)
			continue
		}
		select {
		case d.free <- bt:
		default:
		}
	}
	return blocks, residencies, lerr
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}
