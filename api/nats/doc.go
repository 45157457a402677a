// Package natsapi serves xserve's models over NATS request-reply, so that
// any number of xserve replicas share one subject per model and scale out on
// a NATS server or cluster. docs/NATS.md describes the protocol for client
// writers; this comment is its summary.
//
// The package lives in directory api/nats but is named natsapi, so that it
// can be imported beside github.com/nats-io/nats.go without renaming either.
//
// # Subjects
//
// With the default prefix "xserve.v1", every replica subscribes, in the queue
// group "xserve" (so that each request goes to exactly one replica):
//
//	xserve.v1.infer.<model>   one per model the replica serves READY
//	xserve.v1.infer           any model; the body names it ("model": ...)
//	xserve.v1.generate.<model> text generation, streamed (generate.go)
//
// and, outside the queue group, to xserve.v1.seq.<home>.<model> for each
// stateful model: the sequences whose state it holds (sticky.go).
//
// A request to xserve.v1.infer.<model> that no replica serves gets the NATS
// server's "no responders" status at once; on xserve.v1.infer, a model no
// replica knows gets a 404 error reply. All replicas of one queue group are
// expected to serve the same model repository.
//
// # Payloads and headers
//
// The message body is the body of POST /v1/infer (package payload): JSON, or
// a JSON header followed by raw tensor bytes (the binary tensor extension,
// with the Inference-Header-Content-Length header); with the header
// "Xserve-Protocol: v2" it is the Open Inference Protocol's JSON form instead.
// Request headers (all optional):
//
//	Content-Encoding                gzip, zstd, deflate or identity
//	Accept-Encoding                 compress the reply body (zstd, gzip)
//	Inference-Header-Content-Length length of the JSON part (binary extension)
//	Xserve-Protocol                 v1 (default) or v2
//	Xserve-Model-Version            the model version (default: latest)
//	X-Request-Id or Nats-Msg-Id     the request id, echoed as X-Request-Id
//	Xserve-Timeout                  a Go duration ("250ms"); the replica answers
//	                                504 once it passes rather than computing
//
// A successful reply carries the response body with Content-Type,
// Inference-Header-Content-Length (binary outputs), Content-Encoding,
// X-Request-Id, Xserve-Model, Xserve-Model-Version and Xserve-Replica (the
// replica's service instance id). An error reply has the header
// Xserve-Error with the status code (the same table as HTTP, payload.Status:
// 400, 404, 413, 415, 429, 503, 504, 500), Xserve-Error-Message with the
// message HTTP gives, the nats.go/micro error headers Nats-Service-Error-Code
// and Nats-Service-Error, Xserve-Retry-After (seconds) on 429, and the body
// {"error": "..."}.
//
// # Never blocked by clients
//
// The subscription callback only queues a request on a bounded worker pool
// (Options.Workers, Options.QueueSize); when the queue is full it answers 429
// at once instead of blocking the subscription. Replies are plain publishes:
// a client that went away (a dead inbox) or reads slowly (the NATS server
// buffers and cuts off slow consumers) never holds a worker.
//
// # Service discovery
//
// The replica is a nats.go/micro service named "xserve": $SRV.PING, $SRV.INFO
// and $SRV.STATS (all replicas, or one by name and id) list an endpoint per
// model with its versions, buckets, inputs and outputs as metadata, and the
// request counts; the endpoint stats' "data" holds the replica's own counts
// (requests answered, errors, overloads, durable requests, processing time),
// which are exact where micro's own timing only sees the hand-off to the
// worker pool.
//
// # Durable requests
//
// With Options.Durable, the replica also consumes a JetStream work-queue
// stream (default XSERVE_REQUESTS on subjects xserve.v1.durable and
// xserve.v1.durable.<model>) through a durable pull consumer ("xserve")
// shared by all replicas. A client publishes its request to the stream with
// the headers Nats-Msg-Id (its request id: JetStream drops duplicates within
// the stream's duplicate window) and Xserve-Reply-To (its inbox). The replica
// publishes the reply to that inbox, with X-Request-Id and Xserve-Delivery
// (the delivery count), and only then acknowledges the message; a replica
// that dies before acknowledging has the message redelivered to another one
// after the consumer's AckWait. A redelivery may race a slow first attempt,
// so a client must drop replies whose request id it has already seen
// (Client does).
//
// A generation published on xserve.v1.durable.generate.<model> is streamed
// to the client's inbox with its messages numbered (Xserve-Seq) and
// acknowledged after its end; a replica lost before that leaves it to
// another, which generates it again (greedy only), and the client drops the
// numbers it has (durablegen.go).
//
// # Shutdown
//
// Shutdown keeps taking requests until none has arrived for a moment (a
// request published just before it still finds a responder), then stops
// the durable consumer and drains the subscriptions (the
// server stops routing requests to the replica, and those already delivered
// are still queued), answers every queued and running request, flushes the
// replies and closes the connection: no accepted request is dropped.
package natsapi
