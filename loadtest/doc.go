// Package loadtest generates load against an xserve server and summarises
// what it saw: request counts, failures by kind, throughput and latency
// percentiles.
//
// A run sends [Request]s, built once from an [InputSource], to a [Target]
// (the [HTTPTarget] speaks xserve's /v1/infer JSON and the Open Inference
// Protocol v2 in JSON or with the binary tensor extension, the [GRPCTarget]
// the KServe v2 gRPC protocol with raw tensor contents, the [NATSTarget]
// xserve's NATS subjects). Targets that
// implement [Preparer] encode each request body once before the run starts,
// so encoding is never measured.
//
// Two modes, chosen by [Options]:
//
//   - closed loop (Concurrency workers): each worker sends its next request
//     as soon as the previous one completes; throughput is what the server
//     sustains at that concurrency.
//   - open loop (Rate requests per second): requests are sent on a fixed
//     schedule whatever the server does. Latency is measured from each
//     request's scheduled send time, not from when it actually left, so a
//     server that falls behind cannot hide its queueing (no coordinated
//     omission); sends that started late, and scheduled sends that never
//     went out before the run ended, are reported.
//
// [Summary] prints for people and as JSON for machines; [MarkdownTable]
// tabulates runs, and [CompareTable] puts pairs of runs side by side (e.g. a
// model with dynamic batching off and on, as bench/batching.sh does).
//
// Every run is bounded (a duration, a request count, or both), and every
// target refuses to connect anywhere but the loopback interface
// (127.0.0.0/8, ::1) unless told otherwise.
package loadtest
