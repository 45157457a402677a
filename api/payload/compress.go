package payload

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// Content codings the codecs read and write (the values of Content-Encoding).
const (
	EncodingGzip     = "gzip"
	EncodingZstd     = "zstd"
	EncodingDeflate  = "deflate" // zlib format, as HTTP's "deflate" means
	EncodingIdentity = "identity"
)

// Codecs compresses and decompresses bodies. Its methods are safe for
// concurrent use; Close it when done.
type Codecs struct {
	maxOut  int64 // the most bytes Decode produces
	zstdDec sync.Pool
	zstdEnc *zstd.Encoder // EncodeAll is safe for concurrent use
	gzipW   sync.Pool
}

// NewCodecs returns codecs whose Decode refuses to produce more than
// maxDecompressed bytes.
func NewCodecs(maxDecompressed int64) (*Codecs, error) {
	if maxDecompressed <= 0 {
		return nil, fmt.Errorf("payload: NewCodecs: the decompression limit is %d, want > 0", maxDecompressed)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	return &Codecs{maxOut: maxDecompressed, zstdEnc: enc}, nil
}

// Close releases the zstd encoder.
func (cs *Codecs) Close() { cs.zstdEnc.Close() }

// Decode undoes a body's Content-Encoding (gzip, zstd, deflate or
// identity; an unknown one is ErrUnsupportedEncoding, corrupt data
// ErrBadRequest). It streams the decompression
// through a hard limit of maxOut bytes, so a small body that expands without
// bound (a "zip bomb") costs at most maxOut bytes before it is refused with
// ErrTooLarge. It returns body itself for no encoding.
func (cs *Codecs) Decode(encoding string, body []byte) ([]byte, error) {
	return cs.DecodeWithin(encoding, body, nil)
}

// DecodeWithin is Decode reserving the decompressed bytes from lease as
// they are produced (see ReadAll): a burst of bombs costs at most the
// budget, and one that does not fit gets ErrBudget at once.
func (cs *Codecs) DecodeWithin(encoding string, body []byte, lease *Lease) ([]byte, error) {
	enc := strings.ToLower(strings.TrimSpace(encoding))
	if enc == "" || enc == EncodingIdentity {
		return body, nil
	}
	if strings.Contains(enc, ",") {
		return nil, unsupportedEncoding(encoding)
	}
	var r io.Reader
	switch enc {
	case EncodingGzip, "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, badRequest("Content-Encoding gzip: the body is not gzip data: %v", err)
		}
		defer zr.Close()
		r = zr
	case EncodingDeflate:
		zr, err := zlib.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, badRequest("Content-Encoding deflate: the body is not zlib data: %v", err)
		}
		defer zr.Close()
		r = zr
	case EncodingZstd:
		zr, err := cs.zstdReader()
		if err != nil {
			return nil, err
		}
		if err := zr.Reset(bytes.NewReader(body)); err != nil {
			return nil, badRequest("Content-Encoding zstd: the body is not zstd data: %v", err)
		}
		defer func() {
			zr.Reset(nil)
			cs.zstdDec.Put(zr)
		}()
		r = zr
	default:
		return nil, unsupportedEncoding(encoding)
	}
	out, err := ReadAll(r, cs.maxOut, lease, fmt.Sprintf("the body decompressed (Content-Encoding %s)", enc))
	switch {
	case errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded):
		return nil, tooLarge("the body decompresses (Content-Encoding %s) to more than the limit of %d bytes, or asks for a zstd window over %d bytes", enc, cs.maxOut, maxZstdWindow)
	case errors.Is(err, ErrOverLimit):
		return nil, tooLarge("the body decompresses (Content-Encoding %s) to more than the limit of %d bytes", enc, cs.maxOut)
	case errors.Is(err, ErrTooLarge) || errors.Is(err, ErrBudget):
		return nil, err
	case err != nil:
		return nil, badRequest("Content-Encoding %s: corrupt compressed body: %v", enc, err)
	}
	return out, nil
}

func unsupportedEncoding(enc string) error {
	return &encodingError{enc: enc}
}

// encodingError is an unsupported Content-Encoding.
type encodingError struct{ enc string }

func (e *encodingError) Error() string {
	return ErrUnsupportedEncoding.Error() + " " + strconv.Quote(e.enc) + " (want one of gzip, zstd, deflate, identity)"
}
func (e *encodingError) Unwrap() error { return ErrUnsupportedEncoding }

func (cs *Codecs) zstdReader() (*zstd.Decoder, error) {
	if d, ok := cs.zstdDec.Get().(*zstd.Decoder); ok {
		return d, nil
	}
	// Concurrency 1 decodes synchronously in the caller's goroutine. The
	// window a frame may ask for is what the decoder allocates, outside the
	// memory budget: it is capped at the 8 MiB that RFC 8878 asks every
	// decoder to support (zstd's levels use less).
	return zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(uint64(max(cs.maxOut, 1<<20))),
		zstd.WithDecoderMaxWindow(uint64(min(max(cs.maxOut, 1<<20), maxZstdWindow))))
}

// maxZstdWindow is the largest zstd window a request may use.
const maxZstdWindow = 8 << 20

// AcceptEncoding picks the response coding from an Accept-Encoding header:
// zstd, then gzip, then deflate, among those the client accepts (q > 0);
// "" for none.
func AcceptEncoding(header string) string {
	if header == "" {
		return ""
	}
	var zstdOK, gzipOK, deflateOK, star bool
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				}
			}
		}
		ok := q > 0
		switch coding {
		case EncodingZstd:
			zstdOK = ok
		case EncodingGzip, "x-gzip":
			gzipOK = ok
		case EncodingDeflate:
			deflateOK = ok
		case "*":
			star = ok
		}
	}
	switch {
	case zstdOK:
		return EncodingZstd
	case gzipOK:
		return EncodingGzip
	case deflateOK:
		return EncodingDeflate
	case star:
		return EncodingGzip
	}
	return ""
}

// Encode compresses body with enc (EncodingZstd, EncodingGzip or
// EncodingDeflate, as AcceptEncoding chose); any other value returns body
// itself.
func (cs *Codecs) Encode(enc string, body []byte) ([]byte, error) {
	switch enc {
	case EncodingZstd:
		return cs.zstdEnc.EncodeAll(body, make([]byte, 0, len(body)/2+64)), nil
	case EncodingGzip:
		var buf bytes.Buffer
		buf.Grow(len(body)/2 + 64)
		zw, _ := cs.gzipW.Get().(*gzip.Writer)
		if zw == nil {
			zw, _ = gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		} else {
			zw.Reset(&buf)
		}
		defer func() {
			zw.Reset(io.Discard) // drop buf
			cs.gzipW.Put(zw)
		}()
		if _, err := zw.Write(body); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	case EncodingDeflate:
		var buf bytes.Buffer
		zw, _ := zlib.NewWriterLevel(&buf, zlib.BestSpeed)
		if _, err := zw.Write(body); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	return body, nil
}
