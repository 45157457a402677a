package payload

import (
	"github.com/xserve/xserve/internal/tracing"
	"github.com/xserve/xserve/serving"
)

// TraceTimes returns what the trace of a request records of its response
// (tracing.InferSpan.End): the version and bucket it ran, its time queued
// and computing; zero for a failed request (nil response).
func TraceTimes(resp *serving.InferResponse) tracing.Times {
	if resp == nil {
		return tracing.Times{}
	}
	return tracing.Times{Version: resp.ModelVersion, Bucket: resp.Bucket, Queue: resp.QueueTime, Compute: resp.ComputeTime}
}
