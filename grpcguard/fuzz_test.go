package grpcguard

// Fuzz targets for what levee reads from the wire: call keys from incoming
// metadata and peer addresses, the pushback trailer and the RetryInfo
// detail. Their seed corpora are in testdata/fuzz/<Target>/ and run with
// every `go test`; `make fuzz` explores beyond them for FUZZTIME each.

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// validHeaderName reports whether s can be the name of an incoming
// metadata entry: HTTP/2 delivers only lowercase token characters (and
// grpc-go lowercases what it builds), so the transport never hands a
// decide.KeyFunc anything else.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// FuzzHeaderKey checks decide.HeaderKey on any header name and values: it never
// panics, the tap's path (metadata at hand) and the interceptors' path
// (metadata in the context) agree, a key is never longer than decide.MaxKeyLen,
// a short value is its own key, a long one keeps its prefix, and two
// different values never share a key.
func FuzzHeaderKey(f *testing.F) {
	// More seeds, the edge cases, are in testdata/fuzz/FuzzHeaderKey.
	f.Add("x-tenant-id", "x-tenant-id", "tenant-a", "tenant-b", "x-other", "o")
	f.Add("", "x-tenant-id", "", "a", "", "")
	f.Fuzz(func(t *testing.T, name, header, v1, v2, otherName, otherValue string) {
		if !validHeaderName(header) {
			return // the transport never delivers such a name
		}
		pairs := []string{header, v1, header, v2}
		if validHeaderName(otherName) && otherName != header {
			pairs = append(pairs, otherName, otherValue)
		}
		md := metadata.Pairs(pairs...)
		ctx := metadata.NewIncomingContext(context.Background(), md)
		kf := decide.HeaderKey(name)

		tapKey := kf(tapFacts(context.Background(), &tap.Info{Header: md}, decide.Unary))
		ctxKey := kf(callFacts(ctx, "", decide.Unary))
		if tapKey != ctxKey {
			t.Fatalf("HeaderKey(%q): key from metadata %q, from the context %q; want the same", name, tapKey, ctxKey)
		}
		if len(tapKey) > decide.MaxKeyLen {
			t.Fatalf("HeaderKey(%q): key of %d bytes, want at most decide.MaxKeyLen (%d)", name, len(tapKey), decide.MaxKeyLen)
		}
		var want string // the header's first value, if the key names it
		if vs := md[strings.ToLower(name)]; len(vs) > 0 {
			want = vs[0]
		}
		switch {
		case len(want) <= decide.MaxKeyLen && tapKey != want:
			t.Fatalf("HeaderKey(%q) = %q, want the header's first value %q", name, tapKey, want)
		case len(want) > decide.MaxKeyLen && !strings.HasPrefix(tapKey, want[:decide.MaxKeyLen/2]):
			t.Fatalf("HeaderKey(%q) = %q for a long value, want it to keep the value's prefix", name, tapKey)
		}
		if got := kf(tapFacts(context.Background(), &tap.Info{Header: md}, decide.Unary)); got != tapKey {
			t.Fatalf("HeaderKey(%q) = %q, then %q for the same metadata", name, tapKey, got)
		}
		// A call carrying v2 first has v2's key: different values, different keys.
		other := kf(tapFacts(context.Background(), &tap.Info{Header: metadata.Pairs(header, v2)}, decide.Unary))
		if strings.ToLower(name) == header && (v1 == v2) != (tapKey == other) {
			t.Fatalf("HeaderKey(%q): values %q and %q have keys %q and %q; want equal keys exactly for equal values",
				name, v1, v2, tapKey, other)
		}
	})
}

// FuzzPushback checks the pushback trailer both ways. Any trailer value
// parses without panic to a delay that is never negative. A delay the
// server announces (pushback) parses back to that delay rounded up to the
// millisecond; a refusal no wait can cure ("-1") parses to no delay.
func FuzzPushback(f *testing.F) {
	// More seeds, the edge cases, are in testdata/fuzz/FuzzPushback.
	f.Add("250", int64(250*time.Millisecond))
	f.Add("0", int64(1))
	f.Add(" 7", int64(time.Hour))
	f.Fuzz(func(t *testing.T, trailer string, retryAfter int64) {
		md := metadata.Pairs(PushbackTrailer, trailer)
		d, ok := pushbackDelay(&md)
		if ok && d < 0 {
			t.Fatalf("pushbackDelay(%q) = %v, true; want a delay >= 0", trailer, d)
		}
		if ms, err := strconv.ParseInt(trailer, 10, 64); err == nil {
			switch {
			case ms < 0 && ok:
				t.Fatalf("pushbackDelay(%q) = %v, true; want no delay for a negative value", trailer, d)
			case ms >= 0 && ms <= math.MaxInt64/int64(time.Millisecond) && (!ok || d != time.Duration(ms)*time.Millisecond):
				t.Fatalf("pushbackDelay(%q) = %v, %v; want %v, true", trailer, d, ok, time.Duration(ms)*time.Millisecond)
			case ms > math.MaxInt64/int64(time.Millisecond) && (!ok || d != admission.Never):
				t.Fatalf("pushbackDelay(%q) = %v, %v; want admission.Never, true", trailer, d, ok)
			}
		} else if ok {
			t.Fatalf("pushbackDelay(%q) = %v, true; want no delay for a value that is not an integer", trailer, d)
		}

		// The round trip from what the server writes.
		dec := admission.Decision{Refused: true, RetryAfter: time.Duration(retryAfter)}
		v := pushback(decide.NewRefusal(0, "", dec, ""))
		if v == "" {
			if dec.RetryAfter > 0 && dec.RetryAfter != admission.Never {
				t.Fatalf("pushback(RetryAfter %v) wrote no trailer", dec.RetryAfter)
			}
			return
		}
		back := metadata.Pairs(PushbackTrailer, v)
		got, ok := pushbackDelay(&back)
		switch {
		case dec.RetryAfter == admission.Never:
			if ok {
				t.Fatalf("RetryAfter Never wrote %q, read back as %v; want no delay", v, got)
			}
		case !ok || got < dec.RetryAfter || got-dec.RetryAfter >= time.Millisecond:
			t.Fatalf("RetryAfter %v wrote %q, read back as %v, %v; want it rounded up to the millisecond", dec.RetryAfter, v, got, ok)
		}
	})
}

// FuzzRetryDelay checks RetryDelay on any status a server can send (the
// bytes of a google.rpc.Status): it never panics and never returns a
// negative delay.
func FuzzRetryDelay(f *testing.F) {
	seed := func(st *status.Status) []byte {
		b, err := proto.Marshal(st.Proto())
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	withInfo := func(d *errdetails.RetryInfo) []byte {
		st, err := status.New(codes.ResourceExhausted, "levee: rate: rate limit exceeded").WithDetails(d)
		if err != nil {
			f.Fatal(err)
		}
		return seed(st)
	}
	f.Add(seed(refusalOf(context.Background(), codes.ResourceExhausted, "rate", admission.Decision{Refused: true, Reason: "rate limit exceeded", RetryAfter: 40 * time.Millisecond}, "")))
	f.Add(seed(refusalOf(context.Background(), codes.Unavailable, "tenant", admission.Decision{Refused: true, Reason: "over share", RetryAfter: time.Second, PerKey: true}, "acme")))
	f.Add(seed(status.New(codes.Unavailable, "no detail")))
	f.Add(withInfo(&errdetails.RetryInfo{RetryDelay: durpb(2, 500)}))
	f.Add([]byte{0x08, 0x08, 0x1a, 0x00})
	// More seeds, the invalid and out-of-range delays, are in
	// testdata/fuzz/FuzzRetryDelay.
	f.Fuzz(func(t *testing.T, wire []byte) {
		var sp spb.Status
		if proto.Unmarshal(wire, &sp) != nil {
			return
		}
		err := status.FromProto(&sp).Err()
		d, ok := RetryDelay(err)
		if ok && d < 0 {
			t.Fatalf("RetryDelay(%v) = %v, true; want a delay >= 0", err, d)
		}
		if !ok && d != 0 {
			t.Fatalf("RetryDelay(%v) = %v, false; want 0 with false", err, d)
		}
	})
}

// FuzzRefusalRetryInfo checks the RetryInfo round trip: a refusal with a
// retry delay, whatever its key, carries the delay in its status through
// the wire (RetryDelay reads back exactly what the server wrote), and a
// per-key refusal names its key in a QuotaFailure detail.
func FuzzRefusalRetryInfo(f *testing.F) {
	// More seeds, the edge cases, are in testdata/fuzz/FuzzRefusalRetryInfo.
	f.Add(int64(40*time.Millisecond), "", false)
	f.Add(int64(time.Second), "tenant-a", true)
	f.Add(int64(0), "k", true)
	f.Add(int64(-time.Second), "", false)
	f.Fuzz(func(t *testing.T, retryAfter int64, key string, perKey bool) {
		dec := admission.Decision{Refused: true, Reason: "rate limit exceeded", RetryAfter: time.Duration(retryAfter), PerKey: perKey}
		st := refusalOf(context.Background(), codes.ResourceExhausted, "rate", dec, key)
		wire, err := proto.Marshal(st.Proto())
		if err != nil {
			t.Fatalf("refusal status with key %q does not marshal: %v", key, err)
		}
		var sp spb.Status
		if err := proto.Unmarshal(wire, &sp); err != nil {
			t.Fatalf("refusal status with key %q does not unmarshal: %v", key, err)
		}
		got := status.FromProto(&sp)
		if got.Code() != codes.ResourceExhausted {
			t.Fatalf("refusal code = %v, want RESOURCE_EXHAUSTED", got.Code())
		}
		d, ok := RetryDelay(got.Err())
		wantDelay := dec.RetryAfter > 0 && dec.RetryAfter != admission.Never
		if ok != wantDelay || ok && d != dec.RetryAfter {
			t.Fatalf("RetryAfter %v, key %q: RetryDelay after the wire = %v, %v; want %v, %v", dec.RetryAfter, key, d, ok, dec.RetryAfter, wantDelay)
		}
		var quota *errdetails.QuotaFailure
		for _, det := range got.Details() {
			if q, isQ := det.(*errdetails.QuotaFailure); isQ {
				quota = q
			}
		}
		if perKey != (quota != nil) {
			t.Fatalf("PerKey %v, key %q: QuotaFailure detail present = %v", perKey, key, quota != nil)
		}
		if quota != nil && (len(quota.GetViolations()) != 1 || strings.ToValidUTF8(key, "\uFFFD") != quota.GetViolations()[0].GetSubject()) {
			t.Fatalf("key %q: QuotaFailure %v, want one violation naming the key", key, quota)
		}
	})
}

func durpb(seconds int64, nanos int32) *durationpb.Duration {
	return &durationpb.Duration{Seconds: seconds, Nanos: nanos}
}

// FuzzFactsOfMetadata runs any metadata a client can send — a -bin
// header's raw bytes, values that are not UTF-8, many values of one key,
// a criticality claim and a retry count of any value — with any method
// name and no peer, through the tap's facts and the interceptors', and
// an engine's rules: both paths give the same key, tenant and class,
// never a panic, and the refusal of the key renders a status that
// marshals.
func FuzzFactsOfMetadata(f *testing.F) {
	// More seeds, the edge cases, are in testdata/fuzz/FuzzFactsOfMetadata.
	f.Add("/s.S/M", "acme", []byte("\x00\xff"), "critical_plus", "1")
	f.Add("", "", []byte{}, "", "")
	f.Fuzz(func(t *testing.T, method, tenant string, bin []byte, class, attempts string) {
		e, err := decide.New([]decide.Rule{{Key: decide.HeaderKey("x-key-bin"), Tenant: decide.HeaderKey("x-tenant-id"),
			Guards: []admission.Guard{&recorder{}}, Criticality: &decide.Criticality{Default: admission.SheddablePlus}}})
		if err != nil {
			t.Fatal(err)
		}
		md := metadata.MD{
			"x-tenant-id":                 {tenant, "second"},
			"x-key-bin":                   {string(bin)},
			decide.CriticalityHeader:      {class},
			decide.PreviousAttemptsHeader: {attempts},
		}
		ctx := metadata.NewIncomingContext(context.Background(), md)
		var seen [2]admission.Call
		for i, fa := range []decide.Facts{
			tapFacts(context.Background(), &tap.Info{FullMethodName: method, Header: md}, decide.Unary),
			callFacts(ctx, method, decide.Unary),
		} {
			r := e.Match(fa.Method)
			if r == nil {
				t.Fatalf("Match(%q) = nil, want the default rule", method)
			}
			r.Fill(fa, time.Unix(1000, 0), &seen[i])
			if n := fa.PreviousAttempts(); n < 0 {
				t.Fatalf("PreviousAttempts() = %d for %q", n, attempts)
			}
			e.Retrying(fa, time.Unix(1000, 0)) // no peer
		}
		if seen[0].Key != seen[1].Key || seen[0].Tenant != seen[1].Tenant || seen[0].Class != seen[1].Class {
			t.Fatalf("tap facts give key %q, tenant %q, class %v; the interceptors' %q, %q, %v",
				seen[0].Key, seen[0].Tenant, seen[0].Class, seen[1].Key, seen[1].Tenant, seen[1].Class)
		}
		if c := seen[0]; len(c.Key) > decide.MaxKeyLen || len(c.Tenant) > decide.MaxKeyLen || c.Class > admission.SheddablePlus {
			t.Fatalf("key of %d bytes, tenant of %d, class %v; want at most MaxKeyLen and no class above the default", len(c.Key), len(c.Tenant), c.Class)
		}
		d := admission.RefuseFor(admission.CausePerKeyLimited, admission.EvidenceLimit, "key", time.Second)
		d.PerKey = true
		st := refusalStatus(context.Background(), decide.NewRefusal(0, "key", d, seen[0].Key))
		if _, err := proto.Marshal(st.Proto()); err != nil {
			t.Fatalf("refusal of key %q does not marshal: %v", seen[0].Key, err)
		}
	})
}
