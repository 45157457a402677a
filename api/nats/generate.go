package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/xserve/xserve/api/textgen"
	"github.com/xserve/xserve/serving"
)

// Text generation streamed over NATS (docs/NATS.md, "Text generation"):
// a request on <prefix>.generate.<model> (queue group as the infer
// subjects), body {"text_input": "...", "parameters": {...}} as the HTTP
// generate extension takes it, header Xserve-Model-Version optional, gets
// several messages on its reply subject: one per piece of text, header
// Xserve-Stream: data, body {"model_name", "model_version", "text_output"};
// then the last, header Xserve-Stream: end, body the same with
// finish_reason, prompt_tokens and generated_tokens. An error is one error
// reply (Xserve-Error, as the infer subjects') with Xserve-Stream: end.
//
// While it generates, the replica probes the reply subject (a message with
// header Xserve-Stream: probe and a reply subject of its own, which clients
// ignore): once no one listens there (the NATS server answers "no
// responders": the client unsubscribed or went away), the sequence ends
// and its slot is freed. A replica shutting down ends its generations with
// an error reply (503).

// HeaderStream marks the messages of a generation stream: "data", "end"
// or "probe".
const HeaderStream = "Xserve-Stream"

// probeEvery is how often a generation probes its reply subject.
const probeEvery = 200 * time.Millisecond

// GenerateSubject is the subject of model's text generation requests.
func (s *Server) GenerateSubject(model string) string { return s.opts.Prefix + ".generate." + model }

// startGenerate subscribes the generation subjects when the backend
// generates text.
func (s *Server) startGenerate() error {
	b, ok := s.backend.(textgen.Backend)
	if !ok {
		return nil
	}
	s.genCtx, s.genCancel = context.WithCancel(context.Background())
	sub, err := s.nc.QueueSubscribe(s.GenerateSubject("*"), s.opts.QueueGroup, func(m *nats.Msg) {
		if m.Reply == "" || s.closing.Load() {
			return
		}
		s.gens.Go(func() { s.generate(b, m) })
	})
	if err != nil {
		return err
	}
	s.genSub = sub
	return nil
}

// genContext is the context of one generation: it ends with the replica's
// generations (stopGenerate).
func (s *Server) genContext() (context.Context, context.CancelFunc) {
	return context.WithCancel(s.genCtx)
}

// stopGenerate stops taking generation requests; the running ones end
// with s.ctx.
func (s *Server) stopGenerate() {
	if s.genSub != nil {
		_ = s.genSub.Drain()
		s.genCancel()
	}
}

// parseGenerate reads a generation request's model (from the subject),
// version (header) and body.
func (s *Server) parseGenerate(m *nats.Msg) (model string, version int64, r textgen.GenerateRequest, err error) {
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return "", 0, r, textgen.Invalid("the body is not a generate request: %v", err)
	}
	if r.TextInput == nil {
		return "", 0, r, textgen.Invalid("text_input is required")
	}
	if v := headerValue(m.Header, HeaderModelVersion); v != "" {
		if version, err = strconv.ParseInt(v, 10, 64); err != nil {
			return "", 0, r, textgen.Invalid("header %s is not a version number: %q", HeaderModelVersion, v)
		}
	}
	return strings.TrimPrefix(m.Subject, s.opts.Prefix+".generate."), version, r, nil
}

// generate answers one generation request.
func (s *Server) generate(b textgen.Backend, m *nats.Msg) {
	fail := func(err error) {
		msg := errorReply(err, generateStatus(err), s.root)
		msg.Subject = m.Reply
		msg.Header.Set(HeaderStream, "end")
		_ = s.nc.PublishMsg(msg)
	}
	model, version, r, err := s.parseGenerate(m)
	if err != nil {
		fail(err)
		return
	}
	ctx, cancel := s.genContext()
	defer cancel()
	j, err := prepare(ctx, b, model, version, &r)
	if err != nil {
		fail(err)
		return
	}
	defer j.Release()
	var gone atomic.Bool
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		if s.probe(ctx, m.Reply) {
			gone.Store(true)
			cancel()
		}
	}()
	defer func() { <-probed }()
	defer cancel()
	st, err := j.Start(ctx)
	if err != nil {
		fail(err)
		return
	}
	defer st.Close()
	send := func(msg *nats.Msg) error {
		msg.Subject = m.Reply
		return s.nc.PublishMsg(msg)
	}
	s.streamTo(ctx, j, st, send, func(err error) {
		if gone.Load() {
			return // no one to tell
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: the replica is shutting down during the generation", ErrServerClosed)
		}
		fail(err)
	})
}

// prepare holds model's version for r and gives it r's prompt (16 tokens
// at most by default); Release the job.
func prepare(ctx context.Context, b textgen.Backend, model string, version int64, r *textgen.GenerateRequest) (*textgen.Job, error) {
	j, err := textgen.Hold(ctx, b, model, version, &r.Parameters)
	if err != nil {
		return nil, err
	}
	if err := j.PromptText(*r.TextInput, true); err != nil {
		j.Release()
		return nil, err
	}
	j.DefaultMaxTokens(16)
	return j, nil
}

// streamTo sends a generation's pieces of text, each message through
// send; it reports whether the end message was sent. A generation error
// goes to fail.
func (s *Server) streamTo(ctx context.Context, j *textgen.Job, st *textgen.Stream, send func(*nats.Msg) error, fail func(error)) bool {
	out := textgen.GenerateResponse{ModelName: j.Model(), ModelVersion: strconv.FormatInt(j.Version(), 10)}
	for {
		p, err := st.Next(ctx)
		if err != nil {
			fail(err)
			return false
		}
		out.TextOutput = p.Text
		kind := "data"
		if p.Done {
			kind = "end"
			out.FinishReason, out.PromptTokens, out.GeneratedTokens = p.Reason, p.PromptTokens, p.Generated
		}
		data, _ := json.Marshal(out)
		msg := &nats.Msg{Header: nats.Header{HeaderStream: {kind}, HeaderContentType: {"application/json"}}, Data: data}
		if err := send(msg); err != nil {
			return false
		}
		if p.Done {
			return true
		}
	}
}

// probe returns true once no one listens on a generation's reply subject,
// false when ctx ends first.
func (s *Server) probe(ctx context.Context, reply string) bool {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if s.noResponders(ctx, reply) {
			s.log.Debug("natsapi: a generation's client went away", "reply", reply)
			return true
		}
	}
}

// noResponders publishes a probe to reply and says whether the NATS server
// answered that no one subscribes there. A subscription of its own for the
// answer, not the connection's request mux, so that none stays behind.
func (s *Server) noResponders(ctx context.Context, reply string) bool {
	sub, err := s.nc.SubscribeSync(s.nc.NewRespInbox())
	if err != nil {
		return false
	}
	defer sub.Unsubscribe()
	if err := s.nc.PublishMsg(&nats.Msg{Subject: reply, Reply: sub.Subject, Header: nats.Header{HeaderStream: {"probe"}}}); err != nil {
		return false
	}
	wctx, cancel := context.WithTimeout(ctx, probeEvery)
	defer cancel()
	_, err = sub.NextMsgWithContext(wctx) // the "no responders" status is this error
	return errors.Is(err, nats.ErrNoResponders)
}

// generateStatus is the status code of a generation error.
func generateStatus(err error) int {
	if errors.Is(err, textgen.ErrInvalid) || errors.Is(err, serving.ErrNotGenerative) {
		return http.StatusBadRequest
	}
	return statusOf(err)
}

// GenerateEnd is how a generation streamed to a Client ended.
type GenerateEnd struct {
	ModelName, ModelVersion string
	// FinishReason is "stop" or "length".
	FinishReason string
	// PromptTokens and GeneratedTokens count the tokens.
	PromptTokens, GeneratedTokens int
}

// Generate streams a text generation from model (version 0: the latest):
// params are the sampling parameters by their OpenAI names (nil for the
// defaults). Each piece of text goes to onText as it comes. The stream
// ends with ctx (the replica then frees the slot), with an error reply
// (*ReplyError), or with its end, which Generate returns. With
// ClientOptions.Durable the request goes through the durable stream
// (greedy only): a replica lost mid-generation is replaced by another that
// generates it again, and the pieces it sends again are dropped.
func (c *Client) Generate(ctx context.Context, model string, version int64, text string, params *textgen.Params, onText func(string)) (*GenerateEnd, error) {
	if params == nil {
		params = &textgen.Params{}
	}
	body, err := json.Marshal(textgen.GenerateRequest{TextInput: &text, Parameters: *params})
	if err != nil {
		return nil, err
	}
	sub, err := c.nc.SubscribeSync(c.nc.NewInbox())
	if err != nil {
		return nil, fmt.Errorf("natsapi: generate: subscribe: %w", err)
	}
	defer sub.Unsubscribe()
	id := nuid.Next()
	msg := &nats.Msg{Subject: c.opts.Prefix + ".generate." + model, Reply: sub.Subject, Data: body, Header: nats.Header{HeaderRequestID: {id}}}
	if version > 0 {
		msg.Header.Set(HeaderModelVersion, strconv.FormatInt(version, 10))
	}
	if err := c.publishGenerate(ctx, model, id, msg); err != nil {
		return nil, err
	}
	next := 0 // the durable stream's next message number
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("%w: no replica is subscribed to %s", ErrNoResponders, msg.Subject)
		}
		if err != nil {
			return nil, fmt.Errorf("natsapi: generate on %s: %w", msg.Subject, err)
		}
		kind := headerValue(m.Header, HeaderStream)
		if kind == "probe" || !c.nextInStream(m, &next) {
			continue
		}
		if rerr := replyError(m); rerr != nil {
			return nil, rerr
		}
		var r textgen.GenerateResponse
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return nil, fmt.Errorf("natsapi: generate on %s: a message is not a generation reply: %w", msg.Subject, err)
		}
		if r.TextOutput != "" {
			onText(r.TextOutput)
		}
		if kind == "end" {
			return &GenerateEnd{ModelName: r.ModelName, ModelVersion: r.ModelVersion, FinishReason: r.FinishReason,
				PromptTokens: r.PromptTokens, GeneratedTokens: r.GeneratedTokens}, nil
		}
	}
}

// publishGenerate publishes a generation request: on the generate subject,
// or with ClientOptions.Durable to the durable stream, the reply subject
// in header Xserve-Reply-To.
func (c *Client) publishGenerate(ctx context.Context, model, id string, msg *nats.Msg) error {
	if !c.opts.Durable {
		if err := c.nc.PublishMsg(msg); err != nil {
			return fmt.Errorf("natsapi: generate: publish on %s: %w", msg.Subject, err)
		}
		return nil
	}
	msg.Subject = durableSubject(c.opts.Prefix, durableGeneratePrefix+model)
	msg.Header.Set(HeaderReplyTo, msg.Reply)
	msg.Header.Set(HeaderMsgID, c.msgID(id))
	msg.Reply = ""
	retries := int(max(c.opts.StreamWait, 0) / streamRetryWait)
	if _, err := c.js.PublishMsg(ctx, msg, jetstream.WithRetryWait(streamRetryWait), jetstream.WithRetryAttempts(retries)); err != nil {
		return c.publishError(err, id, msg.Subject)
	}
	return nil
}

// nextInStream reports whether m is the next message of a durable
// generation stream (numbered in header Xserve-Seq), counting the ones a
// replica taking the generation over sends again; a plain generation's
// messages are not numbered and are all next.
func (c *Client) nextInStream(m *nats.Msg, next *int) bool {
	v := headerValue(m.Header, HeaderSeq)
	if v == "" {
		return true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < *next {
		c.duplicates.Add(1)
		return false
	}
	*next = n + 1
	return true
}
