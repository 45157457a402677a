package natsapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// Routing with Options.OnDemand (the backend loads models on their first
// request and evicts the least recently used, serving.LoadLazy): every
// replica subscribes to PREFIX.infer.<model> for every model of the
// repository, and to PREFIX.warm.<model> for the models it holds loaded
// (its announcement: both are micro endpoints, $SRV.INFO lists them with
// "held" in their metadata). A replica that gets a request for a model it
// does not hold first forwards it to PREFIX.warm.<model>: when a replica
// holds the model, that one answers and the reply is relayed as it came
// (its Xserve-Replica, plus Xserve-Forwarded-By); when none does, the NATS
// server says "no responders" at once and the replica loads the model and
// answers itself. A request on PREFIX.warm.<model> is never forwarded
// again.

// HeaderForwardedBy is, on a request forwarded to a replica holding its
// model and on the reply relayed back, the service instance id of the
// replica that forwarded it.
const HeaderForwardedBy = "Xserve-Forwarded-By"

// DefaultForwardTimeout is Options.ForwardTimeout's default.
const DefaultForwardTimeout = 30 * time.Second

// warmSubject is the subject of the replicas holding model.
func warmSubject(prefix, model string) string { return prefix + ".warm." + model }

// holds reports whether the backend holds model loaded now.
func (s *Server) holds(model string) bool {
	r, ok := s.backend.(interface{ ModelReady(string, int64) bool })
	return !ok || r.ModelReady(model, 0)
}

// forwards reports whether j, a request for model, is one to forward: with
// Options.OnDemand, not already forwarded, for a model this replica does
// not hold.
func (s *Server) forwards(j *job, model string) bool {
	return s.opts.OnDemand && !j.warm && model != "" && validToken(model) && !s.holds(model)
}

// forwardHeader is the header of j forwarded: j's without its reply
// subject, with this replica as the forwarder and, when j had a timeout,
// what is left of ctx's deadline (the forwarded request starts now).
func (s *Server) forwardHeader(ctx context.Context, j *job) nats.Header {
	h := nats.Header{}
	for k, v := range j.header {
		if k != HeaderReplyTo {
			h[k] = v
		}
	}
	h.Set(HeaderForwardedBy, s.ID())
	if dl, ok := ctx.Deadline(); ok && headerValue(j.header, HeaderTimeout) != "" {
		h.Set(HeaderTimeout, time.Until(dl).Round(time.Millisecond).String())
	}
	return h
}

// maybeForward forwards j, a request for model, to a replica holding the
// model when this one does not (Options.OnDemand). forwarded false means
// that no replica holds it warm, or the one that did failed to answer in
// time: the caller answers itself.
func (s *Server) maybeForward(ctx context.Context, j *job, model string) (reply *nats.Msg, forwarded bool) {
	if !s.forwards(j, model) {
		return nil, false
	}
	timeout := s.opts.ForwardTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	inbox := s.nc.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		s.log.Warn("natsapi: cannot forward a request; answering it here", "model", model, "err", err)
		return nil, false
	}
	defer sub.Unsubscribe()
	h := s.forwardHeader(ctx, j)
	if err := s.nc.PublishMsg(&nats.Msg{Subject: warmSubject(s.opts.Prefix, model), Reply: inbox, Header: h, Data: j.data}); err != nil {
		return nil, false
	}
	m, err := sub.NextMsgWithContext(ctx)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, false // no replica holds it
	case err != nil:
		s.log.Warn("natsapi: the replica holding the model did not answer a forwarded request in time; answering it here", "model", model, "timeout", timeout, "err", err)
		return nil, false
	case headerValue(m.Header, HeaderError) == strconv.Itoa(http.StatusServiceUnavailable):
		return nil, false // the replica holding it is shutting down or unloading it
	}
	j.stats.forwarded.Add(1)
	out := &nats.Msg{Header: m.Header, Data: m.Data}
	if out.Header == nil {
		out.Header = nats.Header{}
	}
	out.Header.Set(HeaderForwardedBy, s.ID())
	return out, true
}
