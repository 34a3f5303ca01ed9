package peeraddr

import (
	"net"
	"net/netip"
	"testing"
)

type strAddr string

func (strAddr) Network() string  { return "x" }
func (a strAddr) String() string { return string(a) }

func TestClient(t *testing.T) {
	tests := []struct {
		name string
		give net.Addr
		want string // "" for no client
	}{
		{"ipv4", &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5}, "10.1.2.3"},
		{"ipv4 in ipv6", &net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 5}, "10.1.2.3"},
		{"ipv6 /64", &net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), Port: 5}, "2001:db8:1:2::"},
		{"ipv6 zone", &net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0", Port: 5}, "fe80::"},
		{"other ip:port", strAddr("10.9.9.9:80"), "10.9.9.9"},
		{"other ipv6 ip:port", strAddr("[2001:db8:1:2::7]:80"), "2001:db8:1:2::"},
		{"unix", &net.UnixAddr{Name: "@", Net: "unix"}, ""},
		{"nil TCPAddr", (*net.TCPAddr)(nil), ""},
		{"nil", nil, ""},
	}
	for _, tt := range tests {
		got := Client(tt.give)
		want := netip.Addr{}
		if tt.want != "" {
			want = netip.MustParseAddr(tt.want)
		}
		if got != want {
			t.Errorf("%s: Client(%v) = %v, want %v", tt.name, tt.give, got, want)
		}
	}
}
