package natsapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/xserve/xserve/serving"
)

// Sequences stick to the replica holding their state. A stateful model's
// sequence keeps its state in the replica that ran its first step; another
// replica of the queue group does not have it. So every replica also
// subscribes, outside the queue group, to PREFIX.seq.<home>.<model> for
// each stateful model it serves, <home> being a token of its own for its
// life (Server.Home), and the reply to every step of a sequence carries
// that subject in Xserve-Sequence-Subject. A client sends a sequence's
// first step (Xserve-Sequence-Start) to PREFIX.infer.<model> as any
// request, and its later steps to the subject the replies name (Client
// does). When that replica is gone, the NATS server says "no responders"
// on the subject: the sequence's state is lost with it, and the client
// says so rather than starting the sequence again elsewhere from zero.

// HeaderSequenceSubject is, on the reply to a step of a sequence, the
// subject that reaches the replica holding the sequence's state: the
// sequence's later steps go there.
const HeaderSequenceSubject = "Xserve-Sequence-Subject"

// sequenceSubject is the subject of model's sequences held by the replica
// whose home token is home.
func sequenceSubject(prefix, home, model string) string {
	return prefix + ".seq." + home + "." + model
}

// Home returns the replica's own token in the subjects of the sequences
// it holds (PREFIX.seq.<home>.<model>); it stays the same for the
// server's life.
func (s *Server) Home() string { return s.home }

// sequenceSpecs returns the endpoints of this replica's sequences: one per
// stateful model among names.
func (s *Server) sequenceSpecs(names []string, unique func(string) string) []endpointSpec {
	var specs []endpointSpec
	for _, n := range names {
		md, err := s.backend.Metadata(n, 0)
		if err != nil || !md.Stateful || !validToken(n) {
			continue
		}
		specs = append(specs, endpointSpec{
			name:    unique("seq_" + unsafeName.ReplaceAllString(n, "_")),
			model:   n,
			subject: sequenceSubject(s.opts.Prefix, s.home, n),
			metadata: map[string]string{"model": n, "about": "the sequences of the model whose state this replica holds; " +
				"the replies to their steps name this subject in " + HeaderSequenceSubject},
		})
	}
	return specs
}

// stick names, on the reply to a sequence step, the subject of the
// replica that holds the sequence, once the replica is subscribed to it (a
// model loaded on demand gets it at the next Sync, which this asks for;
// until then its replies name none, and the client keeps the model's
// subject).
func (s *Server) stick(j *job, reply *nats.Msg) {
	model := ""
	if reply != nil {
		model = headerValue(reply.Header, HeaderModel)
	}
	if !j.sequence || model == "" {
		return
	}
	subject := sequenceSubject(s.opts.Prefix, s.home, model)
	if live := s.live.Load(); live != nil && (*live)[subject] {
		reply.Header.Set(HeaderSequenceSubject, subject)
		return
	}
	select {
	case s.syncNow <- struct{}{}:
	default:
	}
}

// ErrSequenceLost is wrapped by a Client's error for a step of a sequence
// whose replica is gone: its state went with it.
var ErrSequenceLost = errors.New("natsapi: the replica holding the sequence is gone")

// sequenceKey is the key of msg's sequence in the client's table, "" when
// msg is not a sequence step.
func sequenceKey(model string, msg *nats.Msg) string {
	id := headerValue(msg.Header, HeaderSequenceID)
	if id == "" {
		return ""
	}
	return model + "\x00" + id
}

// route returns the subject of msg, a request for model: for a later step
// of a sequence, the subject of the replica holding it; otherwise the
// model's (a first step forgets where the sequence was).
func (c *Client) route(model string, msg *nats.Msg) (subject string, sticky bool) {
	subject = inferSubject(c.opts.Prefix, model)
	key := sequenceKey(model, msg)
	if key == "" {
		return subject, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if headerValue(msg.Header, HeaderSequenceStart) == "true" {
		delete(c.sticky, key)
		return subject, false
	}
	if to, ok := c.sticky[key]; ok {
		return to, true
	}
	return subject, false
}

// remember keeps where msg's sequence lives, from the reply; an ended or
// failed sequence is forgotten.
func (c *Client) remember(model string, msg, reply *nats.Msg, err error) {
	key := sequenceKey(model, msg)
	if key == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	to := ""
	if reply != nil {
		to = headerValue(reply.Header, HeaderSequenceSubject)
	}
	if err != nil || to == "" || headerValue(msg.Header, HeaderSequenceEnd) == "true" {
		delete(c.sticky, key)
		return
	}
	if c.sticky == nil {
		c.sticky = map[string]string{}
	}
	c.sticky[key] = to
}

// request sends msg on subject and returns the reply, its errors saying
// what failed; sticky says subject is a sequence's replica.
func (c *Client) request(ctx context.Context, model, id, subject string, sticky bool, msg *nats.Msg) (*nats.Msg, error) {
	msg.Subject = subject
	reply, err := c.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders) && sticky:
		return nil, fmt.Errorf("%w: sequence %q of model %q: no replica answers on %s; the sequence's state is lost: start it again (%s: true)",
			ErrSequenceLost, headerValue(msg.Header, HeaderSequenceID), model, subject, HeaderSequenceStart)
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: no replica is subscribed to %s (is xserve connected, and serving model %q?)", ErrNoResponders, subject, model)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("%w: request %s on %s: %w", ErrTimeout, id, subject, context.DeadlineExceeded)
	case err != nil:
		return nil, fmt.Errorf("natsapi: request %s on %s: %w", id, subject, err)
	}
	return reply, nil
}

// sequenceHeadersOf sets the sequence headers of step on h.
func sequenceHeadersOf(h nats.Header, step *serving.SequenceStep) {
	if step == nil {
		return
	}
	h.Set(HeaderSequenceID, step.ID)
	if step.Start {
		h.Set(HeaderSequenceStart, "true")
	}
	if step.End {
		h.Set(HeaderSequenceEnd, "true")
	}
}
