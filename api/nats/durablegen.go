package natsapi

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xserve/xserve/api/textgen"
)

// Durable text generation (docs/NATS.md, "Durable generation"): a
// generate request published to the durable stream on
// <prefix>.durable.generate.<model>, header Xserve-Reply-To the client's
// inbox, is streamed there as on the plain generate subject, each message
// numbered from 0 in header Xserve-Seq. The replica keeps the request in
// progress while it generates and acknowledges it after the end message;
// a replica that dies (or is cut off, or shuts down) first leaves it to be
// delivered again, and the replica that takes it generates it again from
// the prompt and numbers its messages from 0 again: the client drops the
// numbers it has. Greedy decoding gives the same tokens on every replica
// of the same model files, so a durable generation is greedy: its
// temperature defaults to 0, and a sampled request (temperature > 0) is
// refused (400) rather than streamed with a different continuation.

// HeaderSeq numbers the messages of a durable generation stream from 0.
const HeaderSeq = "Xserve-Seq"

// durableGeneratePrefix starts a durable generation's model token.
const durableGeneratePrefix = "generate."

// durableGenerate answers one durable generation request; done frees its
// consumer slot.
func (s *Server) durableGenerate(msg jetstream.Msg, model, reply string, done func()) {
	defer done()
	seq := 0
	send := func(m *nats.Msg) error {
		m.Subject = reply
		m.Header.Set(HeaderSeq, strconv.Itoa(seq))
		m.Header.Set(HeaderReplica, s.ID())
		seq++
		return s.nc.PublishMsg(m)
	}
	fail := func(err error) {
		m := errorReply(err, generateStatus(err), s.root)
		m.Header.Set(HeaderStream, "end")
		if send(m) == nil {
			msg.TermWithReason(err.Error())
		}
	}
	b, ok := s.backend.(textgen.Backend)
	if !ok {
		fail(fmt.Errorf("%w: this replica does not generate text", textgen.ErrInvalid))
		return
	}
	pm := &nats.Msg{Subject: s.GenerateSubject(model), Header: msg.Headers(), Data: msg.Data()}
	_, version, r, err := s.parseGenerate(pm)
	if err != nil {
		fail(err)
		return
	}
	if t := r.Parameters.Temperature; t != nil && *t > 0 {
		fail(textgen.Invalid("a durable generation is greedy (temperature 0): a replica taking it over must continue it token for token"))
		return
	}
	greedy := 0.0
	r.Parameters.Temperature = &greedy // the default too
	stop := s.reportProgress(msg)
	defer stop()
	ctx, cancel := s.genContext()
	defer cancel()
	j, err := prepare(ctx, b, model, version, &r)
	if err != nil {
		s.giveBack(msg, ctx.Err(), err, fail)
		return
	}
	defer j.Release()
	st, err := j.Start(ctx)
	if err != nil {
		s.giveBack(msg, ctx.Err(), err, fail)
		return
	}
	defer st.Close()
	var streamErr error
	ended := s.streamTo(ctx, j, st, send, func(err error) { streamErr = err })
	switch {
	case ended:
		msg.Ack()
	case streamErr != nil:
		s.giveBack(msg, ctx.Err(), streamErr, fail)
	default: // a publish failed: the connection is going; let the stream deliver it again
		msg.Nak()
	}
}

// giveBack ends a durable generation that failed: one the replica's
// shutdown interrupted (ctxErr set) goes back to the stream for another
// replica; any other error is the client's answer.
func (s *Server) giveBack(msg jetstream.Msg, ctxErr, err error, fail func(error)) {
	if ctxErr != nil || errors.Is(err, ErrServerClosed) {
		msg.Nak()
		return
	}
	fail(err)
}
