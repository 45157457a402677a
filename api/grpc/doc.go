// Package grpcapi serves the KServe v2 gRPC inference protocol, the
// inference.GRPCInferenceService that Triton serves (api/grpc/proto, Go code
// generated into api/grpc/inferencepb by `make proto`), so that
// tritonclient.grpc, perf_analyzer -i grpc and KServe clients work against
// xserve unchanged.
//
// It implements health (ServerLive, ServerReady, ModelReady), metadata,
// Triton's model configuration and statistics extensions, ModelInfer and
// ModelStreamInfer (inputs in raw_input_contents or the typed contents
// fields; outputs always in raw_output_contents) and the repository
// extension (index, load, unload). Shared memory, trace and log settings are
// reported as off, and changes to them answered codes.Unimplemented.
//
// Limits and errors are those of the HTTP API: a request message larger
// than Options.MaxMessageBytes (after gzip decompression) is refused with
// codes.ResourceExhausted, a tensor declaring more than MaxTensorElements
// elements likewise, and serving's errors map to codes as payload.Status
// maps them to HTTP statuses: 400 InvalidArgument, 404 NotFound, 413
// ResourceExhausted, 429 Unavailable, 503 Unavailable, 504
// DeadlineExceeded, others Internal. Responses are gzip-compressed when the
// client asks for it.
package grpcapi
