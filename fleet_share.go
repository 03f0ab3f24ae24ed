package gated

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The share arithmetic of gate_fleet=on: pure functions, no I/O. A share is what one instance
// holds of the fleet's totals; the totals are a share too, the whole.

// A share is a number of physical connections and, for each gate (the default workload first,
// then the workloads in Config order), execution and admission permits beyond them.
//
// conns counts the instance's working connections, its pool's: its lease connection is one more,
// outside the share and outside gate_max_conns (a fleet of n instances holds at most the total P
// working connections and n lease connections), so that the lease costs the fleet no working
// connection. An instance with a share of conns c runs its pool with at most c physical
// connections, and its gates' B add up to at most c. An instance is seated when its share has a
// connection; a seated instance always has a permit (see fairShare). An instance without a seat
// keeps no connection open (see fleet.go) and refuses every operation.
type share struct {
	conns      int
	concurrent []int // B per gate
	queue      []int // Q per gate
}

// zeroShare returns the share of n gates that holds nothing: a newcomer's, until it has seen
// the others.
func zeroShare(gates int) share {
	return share{concurrent: make([]int, gates), queue: make([]int, gates)}
}

func (s share) clone() share {
	return share{conns: s.conns, concurrent: append([]int(nil), s.concurrent...), queue: append([]int(nil), s.queue...)}
}

// dataConns is how many physical connections the pool may open under s: all of them, the lease
// connection being outside the share.
func (s share) dataConns() int { return max(s.conns, 0) }

// seated reports whether s is a share an instance can run an operation with: a connection and a
// permit (a grant may give connections before permits).
func (s share) seated() bool { return s.conns > 0 && sum(s.concurrent) > 0 }

// equal reports whether s and o are the same share.
func (s share) equal(o share) bool {
	return s.conns == o.conns && slices.Equal(s.concurrent, o.concurrent) && slices.Equal(s.queue, o.queue)
}

// within reports whether s is nowhere above o.
func (s share) within(o share) bool {
	if s.conns > o.conns || len(s.concurrent) != len(o.concurrent) || len(s.queue) != len(o.queue) {
		return false
	}
	for i := range s.concurrent {
		if s.concurrent[i] > o.concurrent[i] || s.queue[i] > o.queue[i] {
			return false
		}
	}
	return true
}

// meet returns the share that is in every place the smaller of s and o: what an instance
// holding s may keep on its way to o. s and o have the same gates.
func (s share) meet(o share) share {
	m := s.clone()
	m.conns = min(m.conns, o.conns)
	for i := range m.concurrent {
		m.concurrent[i] = min(m.concurrent[i], o.concurrent[i])
		m.queue[i] = min(m.queue[i], o.queue[i])
	}
	return m
}

// fit returns s lowered until it can be run: the gates' B add up to at most dataConns (taken
// from the last workloads first), and a gate without execution permits has no queue either, so
// that it refuses at once instead of letting callers wait for a permit that cannot come.
func (s share) fit() share {
	f := s.clone()
	room := f.dataConns()
	for i := range f.concurrent {
		f.concurrent[i] = min(max(f.concurrent[i], 0), room)
		room -= f.concurrent[i]
		if f.concurrent[i] == 0 {
			f.queue[i] = 0
		}
		f.queue[i] = max(f.queue[i], 0)
	}
	f.conns = max(f.conns, 0)
	return f
}

// join returns the share that is in every place the larger of s and o: what a member asks for
// when it holds s and its fair share is o.
func (s share) join(o share) share {
	j := s.clone()
	j.conns = max(j.conns, o.conns)
	for i := range j.concurrent {
		j.concurrent[i] = max(j.concurrent[i], o.concurrent[i])
		j.queue[i] = max(j.queue[i], o.queue[i])
	}
	return j
}

// growToward returns what a member holding s (fitted) can run of a grant g: s raised toward g
// wherever g is larger, fitted, and nowhere below s, so that growing never lowers a gate.
func (s share) growToward(g share) share {
	r := s.clone()
	r.conns = max(s.conns, g.conns)
	room := r.dataConns() - sum(s.concurrent)
	for i := range r.concurrent {
		add := min(max(g.concurrent[i]-s.concurrent[i], 0), max(room, 0))
		r.concurrent[i] += add
		room -= add
		if r.concurrent[i] > 0 {
			r.queue[i] = max(s.queue[i], g.queue[i])
		}
	}
	return r
}

// fairShare returns the share of the member at rank (0 = the earliest to join) of a fleet of n
// members with totals t, before fit. The seats are the first min(n, t.conns, ΣB) ranks, so that
// every seated member can have a connection and a permit; the others get nothing. Each total is
// divided among the seats as evenly as integers allow: every seat gets t/seats, and the
// remainder goes one each to consecutive ranks, starting for each gate where the previous gate's
// remainder stopped, so that no member collects every gate's extra and every seat's permits add
// up to at least one. The shares of one total add up to that total exactly, so the fleet is never
// above it.
func fairShare(t share, n, rank int) share {
	s := zeroShare(len(t.concurrent))
	seats := min(n, max(t.conns, 0))
	if b := sum(t.concurrent); b > 0 {
		seats = min(seats, b)
	}
	if seats <= 0 || rank < 0 || rank >= seats {
		return s
	}
	split := func(total, offset int) int {
		if total <= 0 {
			return 0
		}
		v := total / seats
		if (rank-offset%seats+seats)%seats < total%seats {
			v++
		}
		return v
	}
	s.conns = split(t.conns, 0)
	// The extra permits start at rank 0 like the extra connections: the members with an extra
	// connection have the room for them.
	off := 0
	for i := range t.concurrent {
		s.concurrent[i] = split(t.concurrent[i], off)
		off += max(t.concurrent[i], 0) % seats
	}
	off = 0
	for i := range t.queue {
		s.queue[i] = split(t.queue[i], off)
		off += max(t.queue[i], 0) % seats
	}
	return s
}

// targetShare is what the member at rank of n should hold: its fair share, fitted.
func targetShare(t share, n, rank int) share { return fairShare(t, n, rank).fit() }

// sqlInts writes v as a PostgreSQL array literal, "{1,2}".
func sqlInts(v []int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, x := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(x))
	}
	b.WriteByte('}')
	return b.String()
}

// parseInts reads a comma-separated list of integers, as array_to_string writes it.
func parseInts(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	v := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("gated: fleet table: %q is not a list of integers", s)
		}
		v[i] = n
	}
	return v, nil
}

// sum returns the sum of v.
func sum(v []int) int {
	var n int
	for _, x := range v {
		n += x
	}
	return n
}

// String formats s for logs: "conns=5 concurrent=[4 1] queue=[4 1]".
func (s share) String() string {
	return fmt.Sprintf("conns=%d concurrent=%v queue=%v", s.conns, s.concurrent, s.queue)
}
