// Package payload is the wire format of xserve's inference requests and
// responses, shared by every transport (api/http, api/nats): the xserve JSON
// form of /v1/infer, the Open Inference Protocol v2 JSON form, the binary
// tensor extension (a JSON header followed by raw little-endian tensor
// bytes), gzip/zstd/deflate content codings, and the table that maps errors
// to status codes. docs/HTTP.md describes the formats; docs/NATS.md how NATS
// carries them.
//
// Decoding is defensive: a tensor's declared shape is checked against a
// limit and against the size of the data that came with it before its
// buffer is allocated, decompression is streamed through a hard limit, and
// every error wraps ErrBadRequest, ErrTooLarge or ErrUnsupportedEncoding and
// says what was wrong and what was expected.
//
// The package holds no transport and no model logic: a transport reads the
// body and its headers, calls DecodeV1 or DecodeOIP, hands Request.Infer to
// serving, encodes the answer with EncodeV1 or EncodeOIP, and maps errors
// with Status.
package payload
