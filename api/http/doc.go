// Package httpapi serves xserve's models over HTTP with fiber: the xserve
// protocol (POST /v1/infer), the Open Inference Protocol v2 (KServe and
// Triton: health, server and model metadata, readiness, inference with the
// binary tensor extension, the model repository extension), Prometheus
// metrics, and gzip, zstd and deflate compression of request and response
// bodies. docs/HTTP.md describes the wire formats.
//
// The package lives in directory api/http but is named httpapi, so that it
// can be imported beside net/http without renaming either.
//
// The package holds no model logic: it decodes requests into
// serving.InferRequest with package payload (the wire format it shares with
// api/nats), calls a Backend (in production a *serving.Manager), and encodes
// the answer. Errors map to HTTP status codes by payload.Status, the table
// api/nats uses for its error headers, plus the server's own (no route 404,
// server closed 503):
//
//	serving.ErrModelNotFound                         404
//	serving.ErrInvalidInput, serving.ErrNoBucket,
//	  a bad model name, bad JSON, bad binary data,
//	  an unknown dtype, a shape that does not fit    400
//	a body over Options.MaxBodyBytes, a decompressed
//	  body over Options.MaxDecompressedBytes, a
//	  tensor over Options.MaxTensorElements          413
//	an unsupported Content-Encoding                  415
//	serving.ErrOverloaded                            429 (with Retry-After)
//	serving.ErrNotReady, serving.ErrClosed           503
//	a request deadline that passed                   504
//	anything else                                    500 (and logged)
//
// Every error body is JSON: {"error": "what was wrong and what was expected"}.
//
// Limits hold before memory is spent: the body is bounded by
// Options.MaxBodyBytes as it is read, decompression is streamed through a hard
// limit (a gzip bomb is rejected with 413 once it passes
// Options.MaxDecompressedBytes), and a tensor's declared shape is checked
// against Options.MaxTensorElements and against the size of the data that
// came with it before its buffer is allocated.
package httpapi
