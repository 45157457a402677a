package textgen

import (
	"strings"
	"unicode/utf8"

	"github.com/xserve/xserve/serving/generate"
	"github.com/xserve/xserve/tokenizer"
)

// output turns a sequence's tokens into its text: the text decoded so
// far, minus what a stop string may still claim (held back), cut at the
// first stop string.
type output struct {
	tok     *tokenizer.Tokenizer
	prompt  []int64
	stops   []string
	detok   *tokenizer.Detokenizer
	text    string // decoded and released
	held    string // decoded, held back while it may begin a stop string
	stopped bool   // a stop string was found: text ends before it
}

func (o *output) add(ev generate.Event) error {
	if o.stopped {
		return nil
	}
	if o.detok == nil {
		o.detok = o.tok.NewDetokenizer(o.prompt)
	}
	var delta string
	var err error
	if ev.Done {
		delta, err = o.detok.Flush()
	} else {
		delta, err = o.detok.Add(ev.Token)
	}
	if err != nil {
		return err
	}
	o.held += delta
	o.cut(ev.Done)
	return nil
}

// cut moves the text no stop string can claim from held to text.
func (o *output) cut(final bool) {
	for _, s := range o.stops {
		if i := strings.Index(o.held, s); i >= 0 {
			o.held, o.stopped = o.held[:i], true
		}
	}
	if o.stopped || final || len(o.stops) == 0 {
		o.text += o.held
		o.held = ""
		return
	}
	keep := len(o.held) - (longest(o.stops) - 1)
	for keep > 0 && keep < len(o.held) && !utf8.RuneStart(o.held[keep]) {
		keep--
	}
	if keep > 0 {
		o.text += o.held[:keep]
		o.held = o.held[keep:]
	}
}

// take returns the text released since the last take (with final, all of
// it).
func (o *output) take(final bool) string {
	if final {
		o.text += o.held
		o.held = ""
	}
	s := o.text
	o.text = ""
	return s
}

// stopWatch returns the loop's stop condition for the stop strings: the
// generated text (decoded in the loop's own detokenizer) holds one.
func (o *output) stopWatch() func([]int64) bool {
	var d *tokenizer.Detokenizer
	var text string
	n := longest(o.stops)
	return func(gen []int64) bool {
		if d == nil {
			d = o.tok.NewDetokenizer(o.prompt)
		}
		delta, err := d.Add(gen[len(gen)-1])
		if err != nil {
			return false
		}
		text += delta
		for _, s := range o.stops {
			if strings.Contains(text, s) {
				return true
			}
		}
		if len(text) > 4*n {
			text = text[len(text)-2*n:]
		}
		return false
	}
}

func longest(ss []string) int {
	n := 0
	for _, s := range ss {
		n = max(n, len(s))
	}
	return n
}
