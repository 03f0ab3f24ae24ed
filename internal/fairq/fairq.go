// Package fairq is the order in which a gate serves the operations waiting for its execution
// permits, and whom an arrival displaces when the gate is full.
//
// Waiters have a level (a priority) and a tenant. Every waiter of a higher level is served before
// any of a lower one. Within a level, waiters are served round-robin across tenants, first in,
// first out within one (or newest first, when the gate asks for it): the waiters of one tenant at
// one level form a flow, and each turn serves one waiter of the flow at the front, then moves the
// flow to the back. A flow that had no waiters when its first one arrived is served before the
// flows already taking turns, once, as a sparse flow is in FQ-CoDel (RFC 8290): a tenant that
// wants less than its share gets all it wants without waiting for a round of the others.
//
// When the gate is full, an arrival displaces the newest waiter of the flow with the most waiters
// at the lowest level below its own; at its own level, that of the flow with the most waiters
// when that flow has at least two more than the arrival's own (after the move it still has at
// least as many as the arrival's flow: displacing a smaller one would only trade places).
//
// Every operation costs O(1) whatever the number of tenants. A flow exists only while it has
// waiters; emptied flows are recycled, so a queue never holds more flows than it ever held
// waiters at once, and keys that no longer wait leave nothing behind. A Queue is not safe for
// concurrent use: the gate's lock guards it.
package fairq

// Levels is the number of levels: 0 is the lowest.
const Levels = 3

// An Item is one waiter's place in a Queue: embed one per waiter, set Value, and pass the same
// Item to Push and Remove. Its zero value, with Value set, is ready to be pushed.
type Item[T any] struct {
	Value      T
	prev, next *Item[T] // in its flow, oldest first
	f          *flow[T] // nil while the item is not queued
}

// A Queue holds the items waiting in one gate. The zero value is an empty queue.
type Queue[T any] struct {
	levels [Levels]level[T]
	flows  map[flowKey]*flow[T] // the flows with waiters, but those of the empty tenant (level.anon)
	free   *flow[T]             // emptied flows, for reuse, linked by rnext
	n      int
}

type flowKey struct {
	tenant string
	level  int8
}

// A flow is the waiters of one tenant at one level, oldest first.
type flow[T any] struct {
	key          flowKey
	head, tail   *Item[T]
	n            int
	sparse       bool     // on its level's sparse list: not yet served since it began waiting
	rprev, rnext *flow[T] // on its level's sparse or round-robin list
	cprev, cnext *flow[T] // on its level's list of flows with n waiters
}

type level[T any] struct {
	sparse, turns flowList[T] // the flows with waiters: those served first once, then those taking turns
	byCount       []*flow[T]  // byCount[n] heads a list (cprev, cnext) of the flows with n waiters; [0] unused
	maxCount      int         // the most waiters of one flow
	anon          *flow[T]    // the flow of the empty tenant, kept out of the map: callers without a tenant pay no lookup
	n             int         // waiters
}

// A flowList is a doubly linked list of flows through rprev and rnext.
type flowList[T any] struct{ head, tail *flow[T] }

func (l *flowList[T]) pushBack(f *flow[T]) {
	f.rprev, f.rnext = l.tail, nil
	if l.tail != nil {
		l.tail.rnext = f
	} else {
		l.head = f
	}
	l.tail = f
}

func (l *flowList[T]) remove(f *flow[T]) {
	if f.rprev != nil {
		f.rprev.rnext = f.rnext
	} else {
		l.head = f.rnext
	}
	if f.rnext != nil {
		f.rnext.rprev = f.rprev
	} else {
		l.tail = f.rprev
	}
	f.rprev, f.rnext = nil, nil
}

// Len returns the number of items queued.
func (q *Queue[T]) Len() int { return q.n }

// Push queues it, which must not be queued, as the newest waiter of tenant at level (0 to
// Levels-1). It allocates only when the queue holds more flows, or a flow more waiters, than it
// ever did.
func (q *Queue[T]) Push(it *Item[T], tenant string, level int) {
	lv := &q.levels[level]
	k := flowKey{tenant, int8(level)}
	f := q.flow(k)
	if f == nil {
		f = q.newFlow(k)
		lv.sparse.pushBack(f)
		f.sparse = true
	}
	it.f, it.prev, it.next = f, f.tail, nil
	if f.tail != nil {
		f.tail.next = it
	} else {
		f.head = it
	}
	f.tail = it
	lv.recount(f, f.n+1)
	lv.n++
	q.n++
}

// Remove takes it, which must be queued, off the queue.
func (q *Queue[T]) Remove(it *Item[T]) {
	f := it.f
	lv := &q.levels[f.key.level]
	if it.prev != nil {
		it.prev.next = it.next
	} else {
		f.head = it.next
	}
	if it.next != nil {
		it.next.prev = it.prev
	} else {
		f.tail = it.prev
	}
	it.prev, it.next, it.f = nil, nil, nil
	lv.recount(f, f.n-1)
	lv.n--
	q.n--
	if f.n == 0 {
		if f.sparse {
			lv.sparse.remove(f)
		} else {
			lv.turns.remove(f)
		}
		q.dropFlow(f)
	}
}

// Next takes the next waiter to serve off the queue and returns it, or nil when the queue is
// empty: from the highest level with waiters, the flow at the front (sparse flows first), its
// oldest waiter, or its newest with newest. The flow then goes to the back of its level's turns.
func (q *Queue[T]) Next(newest bool) *Item[T] {
	for l := Levels - 1; l >= 0; l-- {
		lv := &q.levels[l]
		if lv.n == 0 {
			continue
		}
		f := lv.sparse.head
		if f == nil {
			f = lv.turns.head
		}
		it := f.head
		if newest {
			it = f.tail
		}
		if f.n > 1 {
			// It stays: to the back of the turns.
			if f.sparse {
				lv.sparse.remove(f)
				f.sparse = false
			} else {
				lv.turns.remove(f)
			}
			lv.turns.pushBack(f)
		}
		q.Remove(it)
		return it
	}
	return nil
}

// Victim returns the waiter that an arrival of tenant at level displaces when the gate is full,
// or nil when the arrival displaces nobody and is refused. It takes nothing off the queue.
func (q *Queue[T]) Victim(tenant string, level int) *Item[T] {
	for l := 0; l < level; l++ {
		if lv := &q.levels[l]; lv.n > 0 {
			return lv.byCount[lv.maxCount].tail
		}
	}
	lv := &q.levels[level]
	if lv.n == 0 {
		return nil
	}
	most := lv.byCount[lv.maxCount]
	own := 0
	if f := q.flow(flowKey{tenant, int8(level)}); f != nil {
		own = f.n
	}
	if own+1 < most.n {
		return most.tail
	}
	return nil
}

// recount moves f, on level lv, from the list of flows with f.n waiters to that of flows with n
// (f.n ± 1), and sets f.n.
func (lv *level[T]) recount(f *flow[T], n int) {
	if old := f.n; old > 0 {
		if f.cprev != nil {
			f.cprev.cnext = f.cnext
		} else {
			lv.byCount[old] = f.cnext
		}
		if f.cnext != nil {
			f.cnext.cprev = f.cprev
		}
		f.cprev, f.cnext = nil, nil
		if old == lv.maxCount && lv.byCount[old] == nil {
			lv.maxCount = old - 1 // counts move by one: f itself now has old-1, or the level is empty
		}
	}
	f.n = n
	if n == 0 {
		return
	}
	for len(lv.byCount) <= n {
		lv.byCount = append(lv.byCount, nil)
	}
	f.cnext = lv.byCount[n]
	if f.cnext != nil {
		f.cnext.cprev = f
	}
	lv.byCount[n] = f
	lv.maxCount = max(lv.maxCount, n)
}

// flow returns the flow of k, or nil when it has no waiters.
func (q *Queue[T]) flow(k flowKey) *flow[T] {
	if k.tenant == "" {
		return q.levels[k.level].anon
	}
	return q.flows[k]
}

func (q *Queue[T]) newFlow(k flowKey) *flow[T] {
	f := q.free
	if f != nil {
		q.free = f.rnext
		f.rnext = nil
	} else {
		f = new(flow[T])
	}
	f.key = k
	if k.tenant == "" {
		q.levels[k.level].anon = f
		return f
	}
	if q.flows == nil {
		q.flows = make(map[flowKey]*flow[T])
	}
	q.flows[k] = f
	return f
}

func (q *Queue[T]) dropFlow(f *flow[T]) {
	if f.key.tenant == "" {
		q.levels[f.key.level].anon = nil
	} else {
		delete(q.flows, f.key)
	}
	*f = flow[T]{rnext: q.free} // the tenant's key is not kept
	q.free = f
}
