package gated

import "sync/atomic"

// Lending between workloads (the gate_workloads option "lend"): the execution permits a lending
// gate leaves idle serve the waiters of the gates that do not lend, up to the total of all B, and
// each comes back at the borrower's next release, never by preemption. A lender's own operation
// that finds its permits lent waits at most for one borrowed operation to end: every release of
// a borrowing gate returns a borrowed permit first, and a returned permit serves the lender's
// waiters before anyone else. Because a gate runs at most its own B plus what lenders lend out
// of theirs, the operations running in all gates never exceed the sum of all B, at most P, and
// nobody waits for a physical connection.
//
// Locks (their order is in gate.go): a borrower's mutex is taken before a lender's, and a lender
// never borrows; a lender that frees a permit lets go of its own mutex before it offers the
// permit to the borrowers. The cost falls on gates with lending configured, and on their slow
// paths: a borrower locks a lender only when it has no free permit of its own, or releases a
// borrowed one.

// lending is one gate's part in lending. The counters are guarded by the gate's mutex.
type lending struct {
	g         *gate
	lender    bool
	lenders   []*lending // of a borrower: the set's lending gates
	borrowers []*lending // of a lender: the set's gates that borrow

	lent      int   // a lender's permits held by borrowers' operations
	nBorrowed int   // a borrower's running operations that hold a borrowed permit
	borrowed  []int // of a borrower: nBorrowed by lender, in lenders' order

	// waitingHint mirrors gate.waiting for a lender's look without the borrower's lock. A
	// borrower counts a waiter before it tries to borrow for it, under the lender's lock, and a
	// lender reads the hint after it freed a permit under that lock, so that either the
	// borrower finds the permit or the lender finds the waiter.
	waitingHint atomic.Int32
}

// linkLending gives the gates of one set their lending parts, when any of them lends.
func linkLending(gates []*gate, lends func(*gate) bool) {
	var lenders, borrowers []*lending
	for _, g := range gates {
		g.lend = &lending{g: g, lender: lends(g)}
		if g.lend.lender {
			lenders = append(lenders, g.lend)
		} else {
			borrowers = append(borrowers, g.lend)
		}
	}
	if len(lenders) == 0 {
		for _, g := range gates {
			g.lend = nil
		}
		return
	}
	for _, l := range lenders {
		l.borrowers = borrowers
	}
	for _, b := range borrowers {
		b.lenders = lenders
		b.borrowed = make([]int, len(lenders))
	}
}

func (l *lending) borrows() bool { return len(l.lenders) > 0 }

// spareLocked reports whether the lender has a permit to lend: idle, and no waiter of its own.
func (l *lending) spareLocked() bool {
	g := l.g
	return !g.closed && g.head == nil && g.running+l.lent < g.concurrent
}

// borrowOne takes a spare permit from the first lender that has one and returns its index, or
// -1. The borrower's mutex is held.
func (l *lending) borrowOne() int {
	for i, ld := range l.lenders {
		ld.g.mu.Lock()
		ok := ld.spareLocked()
		if ok {
			ld.lent++
		}
		ld.g.mu.Unlock()
		if ok {
			return i
		}
	}
	return -1
}

// borrowForWaitersLocked serves g's waiters, a borrower's, with spare permits of the lenders. It
// returns a lender whose permit it took and then had no live waiter for: the caller must call
// its offerToBorrowers once g.mu is unlocked, since another borrower may be waiting for it.
func (g *gate) borrowForWaitersLocked() (reoffer *lending) {
	l := g.lend
	for g.head != nil {
		i := l.borrowOne()
		if i < 0 {
			return nil
		}
		g.running++
		l.nBorrowed++
		l.borrowed[i]++
		if !g.grantLocked(nil, false) {
			g.running--
			l.nBorrowed--
			l.borrowed[i]--
			ld := l.lenders[i]
			ld.g.mu.Lock()
			ld.lent--
			ld.g.mu.Unlock()
			return ld
		}
	}
	return nil
}

// returnBorrowedLocked is release for a borrower that holds borrowed permits: the released permit
// counts as a borrowed one. It keeps serving the borrower's next waiter while its lender has no
// use for it, and otherwise goes back to the lender, to the lender's first waiter if there is
// one. It unlocks g.mu.
func (g *gate) returnBorrowedLocked(pc *physConn) {
	l := g.lend
	i := 0
	for l.borrowed[i] == 0 {
		i++
	}
	ld := l.lenders[i]
	ld.g.mu.Lock()
	if g.head != nil && ld.g.head == nil && !ld.g.closed && ld.g.running+ld.lent <= ld.g.concurrent && g.grantLocked(pc, false) {
		ld.g.mu.Unlock()
		g.mu.Unlock()
		return
	}
	g.running--
	l.nBorrowed--
	l.borrowed[i]--
	g.mu.Unlock()
	ld.giveBackLocked(pc) // unlocks ld.g.mu
}

// giveBackLocked is giveBack with the lender's mutex held; it unlocks it. The permit serves the
// lender's first waiter, or becomes idle, and then may be lent again.
func (l *lending) giveBackLocked(pc *physConn) {
	g := l.g
	l.lent--
	if g.head != nil && g.ownFreeLocked() {
		g.running++
		if g.grantLocked(pc, false) {
			g.mu.Unlock()
			return
		}
		g.running--
	}
	closed := pc != nil && !g.pool.put(pc)
	idle := g.head == nil
	g.mu.Unlock()
	if closed {
		g.pool.destroy(pc)
	}
	if idle {
		l.offerToBorrowers()
	}
}

// offerToBorrowers lets the borrowers with waiters borrow the lender's spare permits. No mutex
// is held.
func (l *lending) offerToBorrowers() {
	for _, b := range l.borrowers {
		if b.waitingHint.Load() > 0 {
			b.g.mu.Lock()
			reoffer := b.g.borrowForWaitersLocked()
			b.g.mu.Unlock()
			if reoffer != nil {
				reoffer.offerToBorrowers()
			}
		}
	}
}
