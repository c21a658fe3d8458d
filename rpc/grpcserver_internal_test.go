package rpc

import (
	"net"
	"testing"
)

// The bridge formats the caller's address itself; it must read as
// net.TCPAddr's own String does, whatever the address.
func TestRemoteAddrIsWhatTheAddressSays(t *testing.T) {
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53012},
		&net.TCPAddr{IP: net.IP{10, 1, 2, 3}, Port: 9090},
		&net.TCPAddr{IP: net.ParseIP("::1"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0", Port: 8080},
		&net.TCPAddr{Port: 7},
		&net.UnixAddr{Name: "/run/room.sock", Net: "unix"},
	} {
		if got, want := remoteAddr(a), a.String(); got != want {
			t.Errorf("remoteAddr(%#v) = %q; want %q", a, got, want)
		}
	}
}
