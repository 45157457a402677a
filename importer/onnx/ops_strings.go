package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// String operators (StringNormalizer, StringSplit, StringConcat,
// RegexFullMatch, Equal of strings, Cast to and from STRING) and the
// string sides of ai.onnx.ml's encoders. Each becomes an xserve.string_*
// node, which runs on the host (fxgraph.SplitHost): the string-to-index
// and index-to-string lookups are host nodes, and everything numeric
// around them stays in the XLA program.

func registerStrings(cs converters) {
	cs.register("", "StringNormalizer", 10, stringNormalizerConvert)
	cs.register("", "StringSplit", 20, stringSplitConvert)
	cs.register("", "StringConcat", 20, stringBinaryConvert(fxgraph.XserveStringConcat))
	cs.register("", "RegexFullMatch", 20, regexFullMatchConvert)
}

func stringsAny(v [][]byte) []any {
	out := make([]any, len(v))
	for i, s := range v {
		out[i] = string(s)
	}
	return out
}

// stringConst is a 1-D string constant.
func stringConst(c *Ctx, name string, v [][]byte) *fxgraph.Node {
	t := tensor.New(tensor.String, int64(len(v)))
	copy(t.Strings, v)
	return c.Constant(name, t)
}

func stringNormalizerConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	action := c.AttrString("case_change_action", "NONE")
	if action != "NONE" && action != "LOWER" && action != "UPPER" {
		return fmt.Errorf("case_change_action %q, want NONE, LOWER or UPPER", action)
	}
	var stop [][]byte
	if a := c.Attr("stopwords"); a != nil {
		stop = a.Strings
	}
	c.SetOutput(0, b.emitKw(fxgraph.XserveStringNormalize, []any{x}, map[string]any{
		"case": action, "case_sensitive": c.AttrInt("is_case_sensitive", 0) != 0, "stopwords": stringsAny(stop)}))
	return b.err
}

func stringSplitConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	split := b.emitKw(fxgraph.XserveStringSplit, []any{x}, map[string]any{
		"delimiter": c.AttrString("delimiter", ""), "maxsplit": c.AttrInt("maxsplit", -1)})
	c.SetOutput(0, b.emit(fxgraph.GetItem, split, int64(0)))
	c.SetOutput(1, b.emit(fxgraph.GetItem, split, int64(1)))
	return b.err
}

func stringBinaryConvert(target *fxgraph.Op) Converter {
	return func(c *Ctx, n *Node) error {
		b := &mlBuild{c: c}
		x, err := c.Input(0)
		if err != nil {
			return err
		}
		y, err := c.Input(1)
		if err != nil {
			return err
		}
		c.SetOutput(0, b.emit(target, x, y))
		return b.err
	}
}

func regexFullMatchConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	c.SetOutput(0, b.emitKw(fxgraph.XserveRegexFullMatch, []any{x}, map[string]any{"pattern": c.AttrString("pattern", "")}))
	return b.err
}

// stringCast converts x to dt where either is STRING: numbers written as
// text (fxgraph.FormatNumber) or text parsed as numbers.
func stringCast(c *Ctx, x *fxgraph.Node, dt tensor.DType) (*fxgraph.Node, error) {
	b := &mlBuild{c: c}
	src := Meta(x).DType
	var y *fxgraph.Node
	switch {
	case src == dt:
		return x, nil
	case dt == tensor.String:
		y = b.emit(fxgraph.XserveStringFormat, x)
	default:
		y = b.emitKw(fxgraph.XserveStringParse, []any{x}, map[string]any{"dtype": dt})
	}
	return y, b.err
}

// stringLabels maps class indexes to string labels on the host.
func (b *mlBuild) stringLabels(idx *fxgraph.Node, labels [][]byte) *fxgraph.Node {
	return b.emitKw(fxgraph.XserveStringTake, []any{stringConst(b.c, "classlabels_strings", labels), idx}, map[string]any{"default": ""})
}
