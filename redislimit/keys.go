package redislimit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// What a bucket's key holds between its braces, its hash tag: the tag
// decides the slot of a Redis Cluster, and it ends at the first '}'. A key
// comes from what a client sent (a header, a method name), so a key
// holding '}' would end the tag early and pick its slot ("a}x" and "a}y"
// on the slot of "a"), and a key named like the heartbeat's set would be
// that set. So a key is written as it is only when it is plain: at most
// maxTagLen bytes, without '{', '}' or '%', and not reservedTag. Any other
// key is written in a form no plain key has: '%', '{' and '}' as %25, %7B
// and %7D; reservedTag as "%" + reservedTag; a key longer than maxTagLen
// as "%H" and the hex of its SHA-256. Escaping gives '%' followed by '2'
// or '7' only, so the three forms cannot meet, and distinct keys keep
// distinct tags; each tag depends on the whole key.
const (
	maxTagLen   = 256
	reservedTag = "replicas" // the heartbeat's set is "<prefix>:<name>:{replicas}"
)

// tag returns the name of key's bucket, what goes between the braces of
// its Redis key (see above). A plain key is returned as it is, without
// allocating.
func tag(key string) string {
	if len(key) <= maxTagLen && key != reservedTag && !strings.ContainsAny(key, "{}%") {
		return key
	}
	if len(key) > maxTagLen {
		sum := sha256.Sum256([]byte(key))
		return "%H" + hex.EncodeToString(sum[:])
	}
	if key == reservedTag {
		return "%" + reservedTag
	}
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
