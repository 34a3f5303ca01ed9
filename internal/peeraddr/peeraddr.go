// Package peeraddr tells which client a remote address belongs to, as
// levee's caps per client count it: its IP address, an IPv6 one cut to
// its /64 prefix, since one host or site owns the whole prefix and may
// open each connection or stream from another address of it.
package peeraddr

import (
	"net"
	"net/netip"
)

// Client returns the client of a: its IP address (an IPv4-mapped IPv6
// address as IPv4, without a zone), an IPv6 one cut to its /64 prefix;
// the zero Addr when a is nil or not an IP address (a Unix socket, say).
// It reads a *net.TCPAddr directly and parses any other address's
// "ip:port" text.
func Client(a net.Addr) netip.Addr {
	var ap netip.AddrPort
	switch t := a.(type) {
	case nil:
		return netip.Addr{}
	case *net.TCPAddr:
		if t == nil {
			return netip.Addr{}
		}
		ap = t.AddrPort()
	default:
		var err error
		if ap, err = netip.ParseAddrPort(a.String()); err != nil {
			return netip.Addr{}
		}
	}
	ip := ap.Addr().Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}
