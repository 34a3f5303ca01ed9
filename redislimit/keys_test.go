package redislimit

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/redistest"
)

// TestKeyTag checks what a bucket's key holds between its braces: a plain
// key as it is, so that buckets keep their names across versions; a key
// holding a brace or '%', or the name of the heartbeat's set, escaped so
// that the tag ends at the key's end; a long key hashed. Distinct keys
// keep distinct Redis keys.
func TestKeyTag(t *testing.T) {
	s, c := single(t)
	l := mustNew(t, c, "api", 100, 10, WithPrefix("svc"), WithHeartbeat(time.Minute, 2*time.Minute))
	long := strings.Repeat("x", maxTagLen+1)
	tests := []struct {
		give, want string
	}{
		{"acme", "svc:api:{acme}"},
		{"", "svc:api:{}"},
		{"10.0.0.1:5000", "svc:api:{10.0.0.1:5000}"},
		{"/pkg.S/M|acme", "svc:api:{/pkg.S/M|acme}"},
		{"a}x", "svc:api:{a%7Dx}"},
		{"{a}", "svc:api:{%7Ba%7D}"},
		{"50%", "svc:api:{50%25}"},
		{"a%7Dx", "svc:api:{a%257Dx}"},
		{"replicas", "svc:api:{%replicas}"},
		{"replicas}:rates", "svc:api:{replicas%7D:rates}"},
		{strings.Repeat("x", maxTagLen), "svc:api:{" + strings.Repeat("x", maxTagLen) + "}"},
	}
	for _, tt := range tests {
		if got := l.Key(tt.give); got != tt.want {
			t.Errorf("Key(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
	if got := l.Key(long); !strings.HasPrefix(got, "svc:api:{%H") || len(got) > 128 {
		t.Errorf("Key(%d bytes) = %q, want a short hashed tag", len(long), got)
	}
	if l.Key(long) == l.Key(long+"y") || l.Key(long) != l.Key(strings.Clone(long)) {
		t.Errorf("Key of long keys: distinct keys must give distinct Redis keys, equal keys equal ones")
	}
	// Every key gives a Redis key of one tag that ends where the key does,
	// and no two of these keys share one.
	seen := map[string]string{}
	keys := []string{"", "%", "%%", "%25", "%7B", "%7D", "{", "}", "{}", "}{", "a}", "a%7D", "replicas", "%replicas",
		"replicas}", "replicas%7D", "%H", "%Hx", long, long + "}", strings.Repeat("}", maxTagLen)}
	for _, k := range keys {
		rk := l.Key(k)
		tag := strings.TrimSuffix(strings.TrimPrefix(rk, "svc:api:{"), "}")
		if strings.ContainsAny(tag, "{}") {
			t.Errorf("Key(%q) = %q: a brace inside the tag", k, rk)
		}
		if rk == l.hbKey || rk == l.hbLoad {
			t.Errorf("Key(%q) = %q, the heartbeat's key", k, rk)
		}
		if other, ok := seen[rk]; ok {
			t.Errorf("Key(%q) = Key(%q) = %q", k, other, rk)
		}
		seen[rk] = k
	}
	// A guard writes a method and a key each as Key does (a token every
	// 100 s: the bucket outlives the check).
	slow := mustNew(t, c, "api", 0.01, 2, WithPrefix("slow"), WithHeartbeat(time.Minute, 2*time.Minute))
	var call admission.Call
	call.Init(context.Background(), "/pkg.S/M", time.Now())
	call.Key = "a}x"
	if d := NewGuard("fleet", slow, ByMethod|ByKey).Admit(call); d.Refused {
		t.Fatalf("Admit = %+v, want admitted", d)
	}
	if got := s.Do("EXISTS", "slow:api:{/pkg.S/M|a%7Dx}"); got != "1" {
		t.Fatalf("EXISTS slow:api:{/pkg.S/M|a%%7Dx} = %s, want 1; keys: %q", got, s.Do("KEYS", "*"))
	}
}

// TestKeyNamedLikeHeartbeat sends calls keyed "replicas", the name of the
// heartbeat's set: before the tag was escaped, the bucket was the set, so
// the script failed (WRONGTYPE) on every such call, counted against the
// breaker on Redis, and enough of them opened it for every key; or, with
// the set expired, the bucket took its place and the heartbeats failed.
func TestKeyNamedLikeHeartbeat(t *testing.T) {
	s, c := single(t)
	l := mustNew(t, c, "hb", 1000, 1000, WithHeartbeat(20*time.Millisecond, 100*time.Millisecond))
	settle(t, s, l)
	ctx := context.Background()
	for i := range 20 {
		if r := l.Allow(ctx, "replicas"); !r.Allowed || r.Local {
			t.Fatalf("Allow(replicas) #%d = %+v, want allowed by Redis", i, r)
		}
	}
	if st := l.Stats(); st.Errors != 0 {
		t.Fatalf("Stats after calls keyed replicas = %+v, want no error", st)
	}
	if r := l.Allow(ctx, "acme"); !r.Allowed || r.Local {
		t.Fatalf("Allow(acme) = %+v, want allowed by Redis", r)
	}
	hb := l.Stats().Heartbeats
	eventually(t, 5*time.Second, "two more heartbeats", func() bool { return l.Stats().Heartbeats >= hb+2 })
	if st := l.Stats(); st.HeartbeatFail != 0 || st.Errors != 0 {
		t.Fatalf("Stats = %+v, want no failed heartbeat and no error", st)
	}
}

// TestClusterKeysSpread sends, on a Redis Cluster of 3 masters, 60 keys
// that a client chose to end their hash tag early ("victim}0", ...): before
// the tag was escaped, every one landed on the slot of "victim", so one
// client could put a fleet's buckets on one node; now a key's slot depends
// on the whole key.
func TestClusterKeysSpread(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	l := mustNew(t, c, "spread", 1, 3, WithHeartbeat(time.Minute, 2*time.Minute))
	ctx := context.Background()
	slots := map[int]bool{}
	for i := range 60 {
		k := "victim}" + strconv.Itoa(i)
		slots[cl.Slot(l.Key(k))] = true
		if r := l.Allow(ctx, k); !r.Allowed || r.Local {
			t.Fatalf("Allow(%q) = %+v, want allowed by the cluster", k, r)
		}
	}
	if len(slots) < 50 {
		t.Errorf("60 keys \"victim}N\" fell on %d slots, want about 60", len(slots))
	}
	for i, n := range cl.Do("DBSIZE") {
		if n == "0" {
			t.Errorf("node %d holds no key after 60 keys, want buckets on every node", i)
		}
	}
}

// TestGuardServedMethods checks that a guard told which methods are served
// (WithMethods) puts the calls of every other method name in one bucket,
// so that a client naming methods without end makes one bucket, not one
// per name; and that served methods keep a bucket each.
func TestGuardServedMethods(t *testing.T) {
	s, c := single(t)
	at := func() int64 { return 1_700_000_000_000_000 }
	// A token every 100 s: the buckets outlive the test.
	l := mustNew(t, c, "served", 0.01, 2, withRedisNow(at), WithHeartbeat(time.Minute, 2*time.Minute))
	served := func(m string) bool { return m == "/pkg.S/M" }
	for _, scope := range []Scope{ByMethod, ByMethod | ByKey} {
		g := NewGuard("fleet", l, scope, WithMethods(served))
		for i := range 50 {
			var call admission.Call
			call.Init(context.Background(), "/junk.S/M"+strconv.Itoa(i), time.Now())
			call.Key = "acme"
			g.Admit(call)
		}
		var call admission.Call
		call.Init(context.Background(), "/pkg.S/M", time.Now())
		call.Key = "acme"
		if d := g.Admit(call); d.Refused {
			t.Fatalf("scope %d: Admit(/pkg.S/M) after 50 unknown methods = %+v, want admitted: its bucket is its own", scope, d)
		}
	}
	var keys []string
	for _, k := range strings.Fields(s.Do("KEYS", "levee:served:{*")) {
		if !strings.HasPrefix(k, "levee:served:{replicas}") { // the heartbeats'
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	want := []string{"levee:served:{*|acme}", "levee:served:{*}", "levee:served:{/pkg.S/M|acme}", "levee:served:{/pkg.S/M}"}
	if !slices.Equal(keys, want) {
		t.Fatalf("Redis keys after 100 calls to 50 unknown methods = %q, want %q: one bucket for all of them", keys, want)
	}

	// With leases: one lease for every unknown method.
	leased := mustNew(t, c, "served-leased", 1000, 100, WithHeartbeat(time.Minute, 2*time.Minute), WithLeases(50*time.Millisecond, time.Second))
	g := NewGuard("fleet", leased, ByMethod, WithMethods(served))
	for i := range 50 {
		var call admission.Call
		call.Init(context.Background(), "/junk.S/M"+strconv.Itoa(i), time.Now())
		g.Admit(call)
	}
	if st := leased.Stats(); st.Leases != 1 {
		t.Fatalf("leased Stats after 50 unknown methods = %+v, want 1 lease", st)
	}
}
