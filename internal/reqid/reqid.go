// Package reqid gives every request an id that follows it through logs,
// responses and NATS headers: the client's X-Request-ID when it sent a
// usable one, else the trace id of its W3C traceparent, else a new one.
package reqid

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// Header is the HTTP header (and lower-cased, the gRPC metadata key) that
// carries the id both ways.
const Header = "X-Request-ID"

// MaxLen is the longest id accepted from a client; a longer one is
// replaced.
const MaxLen = 128

// From returns the id of a request whose X-Request-ID and traceparent
// headers are xRequestID and traceparent (either may be ""). A client's id
// is kept when it is 1..MaxLen visible ASCII characters.
func From(xRequestID, traceparent string) string {
	if valid(xRequestID) {
		return xRequestID
	}
	if id := TraceID(traceparent); id != "" {
		return id
	}
	return New()
}

// TraceID returns the trace id of a W3C traceparent header
// ("00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>"), "" when it is
// not one.
func TraceID(traceparent string) string {
	parts := strings.Split(strings.TrimSpace(traceparent), "-")
	if len(parts) < 4 || len(parts[0]) != 2 || len(parts[1]) != 32 || len(parts[2]) != 16 {
		return ""
	}
	if _, err := hex.DecodeString(parts[1]); err != nil || parts[1] == strings.Repeat("0", 32) {
		return ""
	}
	return strings.ToLower(parts[1])
}

// New returns a fresh random id: 32 hex digits, the size of a trace id.
func New() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func valid(id string) bool {
	if id == "" || len(id) > MaxLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}
