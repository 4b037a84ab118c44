package peers

import "container/list"

// RoutedBlocks is a router's approximate view of the engines' caches
// built from its own decisions only, never from the engines: the prompt
// blocks of the requests it sent to each endpoint, most recent kept. It
// is llm-d's approximate prefix index (the Endpoint Picker's
// prefix-cache-scorer: an LRU of block hashes per server, capacity
// DefaultLRUCapacityPerServer) and SGLang's approximate radix tree (per
// worker; its size is what "the smallest tree" compares). Blocks are
// chained hashes, so a leading run of them is a shared prefix. Not safe
// for concurrent use.
type RoutedBlocks struct {
	capacity int // blocks per endpoint; 0 = unbounded
	eps      map[string]*lruSet
}

type lruSet struct {
	order *list.List // of uint64, most recent first
	at    map[uint64]*list.Element
}

// NewRoutedBlocks returns an empty view keeping at most capacity blocks
// per endpoint (the least recently routed evicted first; 0 = no bound).
func NewRoutedBlocks(capacity int) *RoutedBlocks {
	return &RoutedBlocks{capacity: max(capacity, 0), eps: map[string]*lruSet{}}
}

// Add records blocks (a prompt's full-block hashes, first to last) as
// routed to endpoint: each becomes the most recent.
func (r *RoutedBlocks) Add(endpoint string, blocks []uint64) {
	s := r.eps[endpoint]
	if s == nil {
		s = &lruSet{order: list.New(), at: map[uint64]*list.Element{}}
		r.eps[endpoint] = s
	}
	for _, b := range blocks {
		if e, ok := s.at[b]; ok {
			s.order.MoveToFront(e)
			continue
		}
		s.at[b] = s.order.PushFront(b)
		if r.capacity > 0 && s.order.Len() > r.capacity {
			old := s.order.Back()
			s.order.Remove(old)
			delete(s.at, old.Value.(uint64))
		}
	}
}

// Match is the leading run of blocks recorded for endpoint (0 for an
// endpoint never routed to).
func (r *RoutedBlocks) Match(endpoint string, blocks []uint64) int {
	s := r.eps[endpoint]
	if s == nil {
		return 0
	}
	for i, b := range blocks {
		if _, ok := s.at[b]; !ok {
			return i
		}
	}
	return len(blocks)
}

// Size is how many blocks endpoint holds in the view.
func (r *RoutedBlocks) Size(endpoint string) int {
	if s := r.eps[endpoint]; s != nil {
		return len(s.at)
	}
	return 0
}
