//go:build unix

package gated

import (
	"net"
	"testing"
)

func TestPeerGoneSeesAServerThatHungUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s := newSockCheck(client)
	if s.peerGone() {
		t.Fatal("an idle, open connection reported gone")
	}
	if allocs := testing.AllocsPerRun(100, func() { s.peerGone() }); allocs != 0 {
		t.Errorf("peerGone allocates %v times", allocs)
	}
	server.Write([]byte("N"))
	waitFor(t, "pending byte seen", func() bool { return s.peerGone() })
	buf := make([]byte, 1)
	if _, err := client.Read(buf); err != nil || buf[0] != 'N' {
		t.Fatalf("peerGone consumed the pending byte: %q, %v", buf, err)
	}
	server.Close()
	waitFor(t, "hang-up seen", func() bool { return s.peerGone() })
}
