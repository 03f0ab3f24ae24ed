// Package faultproxy is a TCP proxy for tests that breaks connections on purpose: it cuts a
// connection with a reset (RST) or an orderly close (FIN) at a chosen point of the conversation,
// or stops forwarding to simulate a network partition (a blackhole).
//
// A test starts a proxy in front of a real server and points its client at the proxy:
//
//	p := faultproxy.Start(t, "127.0.0.1:5432")
//	dsn := fmt.Sprintf("postgres://postgres@%s:%d/postgres?sslmode=disable", p.Host(), p.Port())
//
// Then it arms a one-shot [Rule] that fires on the first client bytes containing a pattern, on any
// connection of the proxy, and waits for the rule to have acted:
//
//	fired := p.Arm(faultproxy.Rule{Match: []byte("commit"), Fold: true,
//		When: faultproxy.AfterResponse, How: faultproxy.RST})
//	err := tx.Commit(ctx) // fails, although the server committed
//	<-fired
//
// [Proxy.CutAll] cuts every open connection at once; [Proxy.Blackhole] partitions the network for
// current and future connections until it is lifted.
//
// The proxy listens on 127.0.0.1 only and dials only the target it was started with. It uses only
// the standard library, and every goroutine it starts has ended when [Proxy.Close] returns.
package faultproxy

import (
	"bytes"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// When says at which point of the conversation a [Rule] acts.
type When int

const (
	// BeforeRequest acts instead of forwarding the client's chunk that completes the match:
	// that chunk, and everything after it, never reaches the server. (A match spanning two reads
	// has its start already forwarded.) Use it for "the connection died before COMMIT was sent".
	BeforeRequest When = iota
	// AfterRequest forwards the chunk that completes the match, then acts at once; no byte the
	// server sends after that chunk reaches the client. With [RST] the server's kernel may
	// discard bytes the server has not read yet, so the server may or may not have run the
	// request; tests that need "the server certainly committed" use AfterResponse.
	AfterRequest
	// AfterResponse forwards the chunk that completes the match, waits for the first bytes the
	// server sends after it, swallows them (they never reach the client), then acts: the server
	// has answered, so it has run the request, and the client never learns the outcome.
	AfterResponse
)

// How says how a connection is broken.
type How int

const (
	// RST closes with SO_LINGER 0: the peer sees ECONNRESET, and its kernel may drop bytes not
	// yet read. The client side is reset first, then the server side.
	RST How = iota
	// FIN closes both sides in order, client first: the peers see EOF (an unread byte left in the
	// proxy's socket buffer turns the close into a reset, as close(2) does).
	FIN
	// Blackhole stops forwarding in both directions and keeps the sockets open until the proxy
	// closes: neither peer learns anything, as in a network partition. [Proxy.Blackhole](false)
	// does not revive such a connection: its stream has a gap.
	Blackhole
)

// Rule is a one-shot fault, armed with [Proxy.Arm].
type Rule struct {
	Match []byte // bytes to find in the client-to-server stream; must not be empty
	Fold  bool   // match ASCII letters case-insensitively
	When  When
	How   How
}

// dialTimeout bounds a dial of the target, so that Close never waits long for one.
const dialTimeout = 5 * time.Second

// Proxy forwards every connection accepted on its loopback address to one target, and breaks
// connections when told to. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup // accept loop and one serve per connection

	mu        sync.Mutex
	cond      *sync.Cond // on mu; broadcast when blackhole is lifted or a connection is cut
	conns     map[*conn]struct{}
	rules     []*armed // in arming order
	longest   int      // longest Match ever armed: how much of the stream to remember
	held      int      // goroutines waiting in holdLocked; lets tests see a blackhole take hold
	blackhole bool
	slowDial  time.Duration
	closed    bool
}

type armed struct {
	Rule
	match []byte // Match, lowered when Fold
	fired chan struct{}
}

// conn is one proxied connection. Fields other than client and server are guarded by Proxy.mu.
type conn struct {
	client, server *net.TCPConn // server is nil until dialled; both fixed once the pumps run
	cut            bool         // sockets closed: the pumps stop
	holed          bool         // blackholed for good by a rule or CutAll
	pending        *armed       // an AfterResponse rule waiting for the server's first reply
	frozen         bool         // an AfterRequest rule is acting: nothing more to the client
	tail, win      []byte       // end of the client stream and a scratch buffer, for matching
}

// Start listens on 127.0.0.1:0 and forwards every accepted connection to target, such as
// "127.0.0.1:5432". It fails t if it cannot listen; t.Cleanup closes the proxy.
// A connection whose dial of target fails is reset.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: listening on loopback: %v", err)
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[*conn]struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's address, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Host returns "127.0.0.1".
func (p *Proxy) Host() string { return p.ln.Addr().(*net.TCPAddr).IP.String() }

// Port returns the port the proxy listens on.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Arm adds a one-shot rule; rules are tried in arming order. The rule fires on the first chunk the
// proxy reads from any client whose stream contains r.Match ending in that chunk (so a match
// split across reads is found), and then acts as r.When and r.How say. The returned channel is
// closed once the rule has fully acted: both sockets closed, or the blackhole in force. If the
// connection ends before an AfterResponse rule saw a reply, the channel is never closed.
// Arm panics if r.Match is empty.
func (p *Proxy) Arm(r Rule) (fired <-chan struct{}) {
	if len(r.Match) == 0 {
		panic("faultproxy: Arm with an empty Match")
	}
	a := &armed{Rule: r, match: bytes.Clone(r.Match), fired: make(chan struct{})}
	if r.Fold {
		a.match = lower(a.match)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, a)
	p.longest = max(p.longest, len(a.match))
	return a.fired
}

// CutAll breaks every connection open now, as how says. Later connections are not affected.
func (p *Proxy) CutAll(how How) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.cutLocked(c, how)
	}
}

// Blackhole(true) partitions the network: from now on nothing is forwarded on any connection,
// current or future; new connections are accepted but the target is not dialled. Bytes already
// read stay held, not lost: Blackhole(false) forwards them and resumes, like a healed network.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = on
	p.cond.Broadcast()
}

// SlowDials(d) makes every connection accepted from now on wait d before the proxy dials the
// target, as a server slow to accept does (a flood of connection attempts, an overloaded
// host): a client's connection set-up then takes at least d. Connections already dialled are
// not affected; SlowDials(0) ends it.
func (p *Proxy) SlowDials(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slowDial = d
}

// Conns returns how many connections through the proxy are open: accepted and not yet cut or
// ended by a peer. Blackholed connections count as open.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening, closes every connection (FIN) and waits for all of the proxy's
// goroutines to end. Armed rules that have not fired never fire. Close may be called more
// than once; Start already arranges a call in t.Cleanup.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.ln.Close()
		for c := range p.conns {
			p.cutLocked(c, FIN)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			return // closed; nothing else makes a loopback listener fail for good
		}
		c := &conn{client: nc.(*net.TCPConn)}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			nc.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

func (p *Proxy) serve(c *conn) {
	defer p.wg.Done()
	// A partitioned network lets no handshake through: dial only once the blackhole is lifted.
	p.mu.Lock()
	p.holdLocked(c, true)
	if d := p.slowDial; d > 0 {
		due := false
		t := time.AfterFunc(d, func() {
			p.mu.Lock()
			due = true
			p.cond.Broadcast()
			p.mu.Unlock()
		})
		for !due && !c.cut {
			p.cond.Wait()
		}
		t.Stop()
	}
	cut := c.cut
	p.mu.Unlock()
	if cut {
		return
	}
	nc, err := net.DialTimeout("tcp", p.target, dialTimeout)
	p.mu.Lock()
	if err != nil || c.cut {
		if err == nil {
			nc.Close()
		}
		p.cutLocked(c, RST) // the client sees a refusal, as it would without the proxy
		p.mu.Unlock()
		return
	}
	c.server = nc.(*net.TCPConn)
	p.mu.Unlock()

	done := make(chan struct{})
	go func() {
		defer close(done)
		p.pump(c, false)
	}()
	p.pump(c, true)
	<-done
}

// pump copies one direction of c: client to server when up, else server to client.
func (p *Proxy) pump(c *conn, up bool) {
	src, dst := c.server, c.client
	if up {
		src, dst = c.client, c.server
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.forward(c, up, buf[:n], dst) {
			return
		}
		if err != nil { // a peer closed (or we did): end the whole connection
			p.mu.Lock()
			p.holdLocked(c, up) // across a partition, not even a close gets through
			p.cutLocked(c, FIN)
			p.mu.Unlock()
			return
		}
	}
}

// forward writes b to dst unless a blackhole holds it or a rule acts; false stops the pump.
func (p *Proxy) forward(c *conn, up bool, b []byte, dst *net.TCPConn) bool {
	p.mu.Lock()
	p.holdLocked(c, up)
	if c.cut {
		p.mu.Unlock()
		return false
	}
	var r *armed
	if up {
		r = p.matchLocked(c, b)
	} else if c.pending != nil {
		r, c.pending = c.pending, nil
		p.actLocked(c, r) // swallow the reply
		p.mu.Unlock()
		return true // the loop ends on the closed socket, or waits in the blackhole
	}
	switch {
	case r != nil && r.When == BeforeRequest:
		p.actLocked(c, r)
		p.mu.Unlock()
		return true
	case r != nil && r.When == AfterResponse:
		c.pending, r = r, nil // before writing, so that the reply cannot overtake it
	case r != nil: // AfterRequest
		c.frozen = true // a fast reply must not reach the client before the cut
	}
	p.mu.Unlock()

	// Not under mu: a peer that does not read must not block the other pump or Close.
	if _, err := dst.Write(b); err != nil {
		return true // the next Read fails too and ends the connection
	}
	if r != nil { // AfterRequest
		p.mu.Lock()
		p.actLocked(c, r)
		p.mu.Unlock()
	}
	return true
}

// matchLocked appends b to c's remembered stream and returns the first armed rule whose match
// ends in b, disarming it.
func (p *Proxy) matchLocked(c *conn, b []byte) *armed {
	c.win = append(append(c.win[:0], c.tail...), b...)
	old := len(c.tail)
	var hit *armed
	var folded []byte
	for i, r := range p.rules {
		w := c.win
		if r.Fold {
			if folded == nil {
				folded = lower(c.win)
			}
			w = folded
		}
		from := max(0, old-len(r.match)+1) // the match must end in b, not only in the tail
		if bytes.Contains(w[from:], r.match) {
			hit = r
			p.rules = slices.Delete(p.rules, i, i+1)
			break
		}
	}
	keep := min(len(c.win), max(0, p.longest-1))
	c.tail = append(c.tail[:0], c.win[len(c.win)-keep:]...)
	return hit
}

// holdLocked waits while c is blackholed (or frozen, for the server-to-client pump) and not cut.
func (p *Proxy) holdLocked(c *conn, up bool) {
	for (p.blackhole || c.holed || c.frozen && !up) && !c.cut {
		p.held++
		p.cond.Wait()
		p.held--
	}
}

func (p *Proxy) actLocked(c *conn, r *armed) {
	p.cutLocked(c, r.How)
	close(r.fired)
}

// cutLocked breaks c as how says. Cutting twice does nothing.
func (p *Proxy) cutLocked(c *conn, how How) {
	if c.cut {
		return
	}
	if how == Blackhole {
		c.holed = true
		return
	}
	c.cut = true
	delete(p.conns, c)
	// The client first: it must see the fault before the server can react to it.
	for _, tc := range []*net.TCPConn{c.client, c.server} {
		if tc == nil {
			continue
		}
		if how == RST {
			tc.SetLinger(0)
		}
		tc.Close()
	}
	p.cond.Broadcast()
}

// lower returns b with ASCII letters lowered; bytes.ToLower would rewrite invalid UTF-8.
func lower(b []byte) []byte {
	out := make([]byte, len(b))
	for i, ch := range b {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		out[i] = ch
	}
	return out
}

// String returns the name of w.
func (w When) String() string {
	switch w {
	case BeforeRequest:
		return "BeforeRequest"
	case AfterRequest:
		return "AfterRequest"
	case AfterResponse:
		return "AfterResponse"
	}
	return "When(" + strconv.Itoa(int(w)) + ")"
}

// String returns the name of h.
func (h How) String() string {
	switch h {
	case RST:
		return "RST"
	case FIN:
		return "FIN"
	case Blackhole:
		return "Blackhole"
	}
	return "How(" + strconv.Itoa(int(h)) + ")"
}
