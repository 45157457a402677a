// ONNX ModelProto decoding.
//
// We decode the protobuf wire format directly with protowire, against the
// field numbers of onnx/onnx.proto, instead of using owulveryck/onnx-go or
// generated code: onnx-go drops opset imports, dim_param, fp16/bf16/int8/uint8
// tensors and If/Loop bodies, all of which the importer needs. Decoding by hand
// also lets us bound every allocation by the input size (or by a checked
// shape) and report where in the model a corrupt field sits.

package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xserve/xserve/tensor"
)

// maxNestingDepth bounds the nesting of subgraphs (If/Loop/Scan bodies) and of
// TypeProtos, so that malicious input cannot overflow the stack.
const maxNestingDepth = 64

// Model is a decoded ONNX ModelProto.
type Model struct {
	IRVersion       int64
	OpsetImports    []OpsetID
	ProducerName    string
	ProducerVersion string
	Domain          string
	ModelVersion    int64
	DocString       string
	Graph           *Graph
	Functions       []*Function
	MetadataProps   map[string]string // nil when the model has none
}

// OpsetID names an operator set the model uses. Domain "" or "ai.onnx" is the
// default ONNX domain.
type OpsetID struct {
	Domain  string
	Version int64
}

// Graph is a decoded GraphProto: the main graph of a model or the body of an
// If, Loop or Scan node. Sparse initializers are rejected when decoding.
type Graph struct {
	Name         string
	Nodes        []*Node
	Initializers []*Initializer
	Inputs       []*ValueInfo
	Outputs      []*ValueInfo
	ValueInfo    []*ValueInfo
	DocString    string
}

// Initializer is a named constant tensor of a graph (a weight).
type Initializer struct {
	Name   string
	Tensor *tensor.Tensor
}

// Node is one operator application (NodeProto).
type Node struct {
	Name       string
	OpType     string
	Domain     string // "" or "ai.onnx" for the default domain
	Inputs     []string
	Outputs    []string // an empty name marks an omitted optional input or output
	Attributes []*Attribute
	DocString  string
}

// Attr returns the attribute called name, or nil if the node has none.
func (n *Node) Attr(name string) *Attribute {
	for _, a := range n.Attributes {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// AttrType is the type of an attribute value (AttributeProto.AttributeType).
type AttrType int

// The attribute types, numbered as in onnx.proto.
const (
	AttrUndefined     AttrType = 0
	AttrFloat         AttrType = 1
	AttrInt           AttrType = 2
	AttrString        AttrType = 3
	AttrTensor        AttrType = 4
	AttrGraph         AttrType = 5
	AttrFloats        AttrType = 6
	AttrInts          AttrType = 7
	AttrStrings       AttrType = 8
	AttrTensors       AttrType = 9
	AttrGraphs        AttrType = 10
	AttrSparseTensor  AttrType = 11
	AttrSparseTensors AttrType = 12
	AttrTypeProto     AttrType = 13
	AttrTypeProtos    AttrType = 14
)

var attrTypeNames = [...]string{
	"UNDEFINED", "FLOAT", "INT", "STRING", "TENSOR", "GRAPH", "FLOATS", "INTS",
	"STRINGS", "TENSORS", "GRAPHS", "SPARSE_TENSOR", "SPARSE_TENSORS",
	"TYPE_PROTO", "TYPE_PROTOS",
}

// String returns the onnx.proto name of the type ("INTS", "GRAPH", ...).
func (t AttrType) String() string {
	if t >= 0 && int(t) < len(attrTypeNames) {
		return attrTypeNames[t]
	}
	return fmt.Sprintf("AttrType(%d)", int(t))
}

// Attribute is a decoded AttributeProto. Type says which value field is set.
// Sparse tensor values are not decoded: an attribute of type AttrSparseTensor
// or AttrSparseTensors carries only its name and type.
type Attribute struct {
	Name    string
	Type    AttrType
	F       float32
	I       int64
	S       []byte
	T       *tensor.Tensor
	G       *Graph
	Floats  []float32
	Ints    []int64
	Strings [][]byte
	Tensors []*tensor.Tensor
	Graphs  []*Graph
	// RefAttrName, inside a function body, names the function attribute whose
	// value this attribute takes.
	RefAttrName string
	TP          *TypeInfo   // for AttrTypeProto
	TPs         []*TypeInfo // for AttrTypeProtos
}

// ValueInfo describes a graph input, output or intermediate value.
type ValueInfo struct {
	Name      string
	Type      *TypeInfo // nil when the model gives no type
	DocString string
}

// TypeKind says which kind of value a TypeInfo describes.
type TypeKind int

// The kinds of TypeProto. TypeUnknown covers opaque types and TypeProtos with
// no value set.
const (
	TypeTensor TypeKind = iota
	TypeSequence
	TypeMap
	TypeOptional
	TypeSparseTensor
	TypeUnknown
)

// String returns a lower-case name of the kind ("tensor", "sequence", ...).
func (k TypeKind) String() string {
	switch k {
	case TypeTensor:
		return "tensor"
	case TypeSequence:
		return "sequence"
	case TypeMap:
		return "map"
	case TypeOptional:
		return "optional"
	case TypeSparseTensor:
		return "sparse_tensor"
	case TypeUnknown:
		return "unknown"
	}
	return fmt.Sprintf("TypeKind(%d)", int(k))
}

// TypeInfo is a decoded TypeProto.
//
// For tensors and sparse tensors, Elem is the element type and Dims the shape
// when HasShape is set (HasShape false means the rank is unknown too). For
// sequences and optionals, ElemType is the element's type. For maps, Elem is
// the key type and ElemType the value type.
//
// Elem is tensor.Invalid when the ONNX element type is undefined or has no
// tensor.DType (float8, int4, ...); ElemCode keeps the ONNX
// TensorProto.DataType code so callers can name it in errors.
type TypeInfo struct {
	Kind     TypeKind
	Elem     tensor.DType
	ElemCode int32
	HasShape bool
	Dims     []Dim
	ElemType *TypeInfo
}

// Dim is one dimension of a tensor type: a known size (Known, Value), a
// symbolic one (Param, e.g. "batch"), or unknown (Known false, Param "").
// A negative dim_value in the file is read as unknown.
type Dim struct {
	Value int64
	Param string
	Known bool
}

// Function is a decoded FunctionProto: a model-local operator defined by a
// graph of nodes.
type Function struct {
	Name            string
	Domain          string
	Inputs          []string
	Outputs         []string
	Attributes      []string     // attribute names without defaults
	AttributeProtos []*Attribute // attributes with default values
	Nodes           []*Node
	OpsetImports    []OpsetID
}

// DecodeOptions controls Decode.
type DecodeOptions struct {
	// BaseDir is the directory that external data locations are relative to.
	// When it is "", a tensor stored as external data is an error.
	BaseDir string
	// MaxExternalBytes bounds the total number of bytes read from external
	// data files; 0 means 4 GiB.
	MaxExternalBytes int64
}

const defaultMaxExternalBytes = 4 << 30

// Decode decodes a serialized ONNX ModelProto. Tensors in the result do not
// alias data.
func Decode(data []byte, opts DecodeOptions) (*Model, error) {
	d := newProtoDecoder(opts, false)
	defer d.close()
	m, err := d.model(data)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	return m, nil
}

// ReadModelFile reads and decodes the .onnx file at path, resolving external
// data relative to the file's directory. Tensor data may alias the buffer the
// file was read into.
func ReadModelFile(path string) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	d := newProtoDecoder(DecodeOptions{BaseDir: filepath.Dir(path)}, true)
	defer d.close()
	m, err := d.model(data)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", path, err)
	}
	return m, nil
}

// protoDecoder holds the state of one Decode call.
type protoDecoder struct {
	opts     DecodeOptions
	alias    bool     // tensors may alias the input buffer
	graphs   int      // nesting depth of graphs being decoded
	types    int      // nesting depth of TypeProtos being decoded
	root     *os.Root // BaseDir, opened on first use
	extBytes int64    // external bytes read so far
}

func newProtoDecoder(opts DecodeOptions, alias bool) *protoDecoder {
	if opts.MaxExternalBytes <= 0 {
		opts.MaxExternalBytes = defaultMaxExternalBytes
	}
	return &protoDecoder{opts: opts, alias: alias}
}

func (d *protoDecoder) close() {
	if d.root != nil {
		d.root.Close()
	}
}

// enterNested increments the nesting depth *depth, failing past
// maxNestingDepth; the caller decrements it when done.
func enterNested(depth *int, what string) error {
	if *depth >= maxNestingDepth {
		return fmt.Errorf("%s nested more than %d deep", what, maxNestingDepth)
	}
	*depth++
	return nil
}

func (d *protoDecoder) model(b []byte) (*Model, error) {
	m := &Model{}
	var nOpset, nMeta, nFunc int
	err := eachWireField(b, func(f wireField) error {
		var err error
		switch f.num {
		case 1:
			m.IRVersion, err = f.i64("ir_version")
		case 2:
			m.ProducerName, err = f.str("producer_name")
		case 3:
			m.ProducerVersion, err = f.str("producer_version")
		case 4:
			m.Domain, err = f.str("domain")
		case 5:
			m.ModelVersion, err = f.i64("model_version")
		case 6:
			m.DocString, err = f.str("doc_string")
		case 7:
			err = f.want("graph", protowire.BytesType)
			if err == nil {
				m.Graph, err = d.graph(f.b)
			}
		case 8:
			var op OpsetID
			op, err = opsetID(f, nOpset)
			m.OpsetImports = append(m.OpsetImports, op)
			nOpset++
		case 14:
			if m.MetadataProps == nil {
				m.MetadataProps = map[string]string{}
			}
			err = stringEntry(f, "metadata_props", nMeta, m.MetadataProps)
			nMeta++
		case 25:
			var fn *Function
			fn, err = d.function(f, nFunc)
			m.Functions = append(m.Functions, fn)
			nFunc++
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func opsetID(f wireField, i int) (OpsetID, error) {
	var op OpsetID
	if err := f.want("opset_import", protowire.BytesType); err != nil {
		return op, err
	}
	err := eachWireField(f.b, func(f wireField) error {
		var err error
		switch f.num {
		case 1:
			op.Domain, err = f.str("domain")
		case 2:
			op.Version, err = f.i64("version")
		}
		return err
	})
	if err != nil {
		return op, fmt.Errorf("opset_import %d: %w", i, err)
	}
	return op, nil
}

// stringEntry decodes a StringStringEntryProto into m.
func stringEntry(f wireField, what string, i int, m map[string]string) error {
	if err := f.want(what, protowire.BytesType); err != nil {
		return err
	}
	var k, v string
	err := eachWireField(f.b, func(f wireField) error {
		var err error
		switch f.num {
		case 1:
			k, err = f.str("key")
		case 2:
			v, err = f.str("value")
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s %d: %w", what, i, err)
	}
	m[k] = v
	return nil
}

// graph decodes a GraphProto, prefixing errors with the graph's name.
func (d *protoDecoder) graph(b []byte) (*Graph, error) {
	g := &Graph{}
	item, err := d.graphFields(b, g)
	if err == nil {
		return g, nil
	}
	name := scanString(b, 2)
	if item == "" {
		return nil, fmt.Errorf("graph %q: %w", name, err)
	}
	return nil, fmt.Errorf("graph %q %s: %w", name, item, err)
}

// graphFields fills g from b. On error, item names the part of the graph that
// failed ("node 3 (...)") or is "" for the graph itself.
func (d *protoDecoder) graphFields(b []byte, g *Graph) (item string, err error) {
	if err := enterNested(&d.graphs, "subgraphs"); err != nil {
		return "", err
	}
	defer func() { d.graphs-- }()
	err = eachWireField(b, func(f wireField) error {
		var err error
		switch f.num {
		case 1:
			var n *Node
			n, item, err = d.nodeField(f, len(g.Nodes))
			g.Nodes = append(g.Nodes, n)
		case 2:
			g.Name, err = f.str("name")
		case 5:
			var in *Initializer
			in, item, err = d.initializer(f, len(g.Initializers))
			g.Initializers = append(g.Initializers, in)
		case 10:
			g.DocString, err = f.str("doc_string")
		case 11:
			g.Inputs, item, err = d.appendValueInfo(g.Inputs, f, "input")
		case 12:
			g.Outputs, item, err = d.appendValueInfo(g.Outputs, f, "output")
		case 13:
			g.ValueInfo, item, err = d.appendValueInfo(g.ValueInfo, f, "value_info")
		case 15:
			err = errors.New("sparse initializers not supported")
		}
		return err
	})
	return item, err
}

// nodeField decodes the i-th node of a graph or function.
func (d *protoDecoder) nodeField(f wireField, i int) (*Node, string, error) {
	if err := f.want("node", protowire.BytesType); err != nil {
		return nil, fmt.Sprintf("node %d", i), err
	}
	n, err := d.node(f.b)
	if err != nil {
		name, op := scanString(f.b, 3), scanString(f.b, 4)
		return nil, fmt.Sprintf("node %d (%q, %s)", i, name, op), err
	}
	return n, "", nil
}

func (d *protoDecoder) initializer(f wireField, i int) (*Initializer, string, error) {
	if err := f.want("initializer", protowire.BytesType); err != nil {
		return nil, fmt.Sprintf("initializer %d", i), err
	}
	t, name, err := d.tensor(f.b)
	if err != nil {
		return nil, fmt.Sprintf("initializer %d (%q)", i, scanString(f.b, 8)), err
	}
	return &Initializer{Name: name, Tensor: t}, "", nil
}

func (d *protoDecoder) appendValueInfo(list []*ValueInfo, f wireField, what string) ([]*ValueInfo, string, error) {
	item := fmt.Sprintf("%s %d", what, len(list))
	if err := f.want(what, protowire.BytesType); err != nil {
		return list, item, err
	}
	vi, err := d.valueInfo(f.b)
	if err != nil {
		return list, fmt.Sprintf("%s (%q)", item, scanString(f.b, 1)), err
	}
	return append(list, vi), "", nil
}

func (d *protoDecoder) valueInfo(b []byte) (*ValueInfo, error) {
	vi := &ValueInfo{}
	err := eachWireField(b, func(f wireField) error {
		var err error
		switch f.num {
		case 1:
			vi.Name, err = f.str("name")
		case 2:
			if err = f.want("type", protowire.BytesType); err == nil {
				vi.Type, err = d.typeInfo(f.b)
			}
			if err != nil {
				err = fmt.Errorf("type: %w", err)
			}
		case 3:
			vi.DocString, err = f.str("doc_string")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return vi, nil
}

func (d *protoDecoder) node(b []byte) (*Node, error) {
	n := &Node{}
	err := eachWireField(b, func(f wireField) error {
		var err error
		switch f.num {
		case 1:
			n.Inputs, err = f.appendString(n.Inputs, "input")
		case 2:
			n.Outputs, err = f.appendString(n.Outputs, "output")
		case 3:
			n.Name, err = f.str("name")
		case 4:
			n.OpType, err = f.str("op_type")
		case 5:
			var a *Attribute
			a, err = d.attributeField(f, len(n.Attributes))
			n.Attributes = append(n.Attributes, a)
		case 6:
			n.DocString, err = f.str("doc_string")
		case 7:
			n.Domain, err = f.str("domain")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// attributeField decodes the i-th attribute of a node or function.
func (d *protoDecoder) attributeField(f wireField, i int) (*Attribute, error) {
	if err := f.want("attribute", protowire.BytesType); err != nil {
		return nil, fmt.Errorf("attribute %d: %w", i, err)
	}
	a, err := d.attribute(f.b)
	if err != nil {
		if name := scanString(f.b, 1); name != "" {
			return nil, fmt.Errorf("attribute %q: %w", name, err)
		}
		return nil, fmt.Errorf("attribute %d: %w", i, err)
	}
	return a, nil
}

// attrSeen records which value fields an attribute had, to infer the type of
// attributes written before AttributeProto.type existed.
type attrSeen struct{ f, i, s, t, g, tp, sparse bool }

func (d *protoDecoder) attribute(b []byte) (*Attribute, error) {
	a := &Attribute{}
	var seen attrSeen
	err := eachWireField(b, func(f wireField) error { return d.attributeValue(a, &seen, f) })
	if err != nil {
		return nil, err
	}
	if a.Type == AttrUndefined {
		a.Type = inferAttrType(a, seen)
	}
	return a, nil
}

func (d *protoDecoder) attributeValue(a *Attribute, seen *attrSeen, f wireField) error {
	var err error
	switch f.num {
	case 1:
		a.Name, err = f.str("name")
	case 2:
		a.F, err = f.f32("f")
		seen.f = true
	case 3:
		a.I, err = f.i64("i")
		seen.i = true
	case 4:
		a.S, err = f.data("s", d.alias)
		seen.s = true
	case 5:
		a.T, err = d.tensorField(f, "t")
		seen.t = true
	case 6:
		if err = f.want("g", protowire.BytesType); err == nil {
			a.G, err = d.graph(f.b)
		}
		seen.g = true
	case 7:
		a.Floats, err = f.appendFloat32s(a.Floats, "floats")
	case 8:
		a.Ints, err = f.appendInt64s(a.Ints, "ints")
	case 9:
		var s []byte
		s, err = f.data("strings", d.alias)
		a.Strings = append(a.Strings, s)
	case 10:
		var t *tensor.Tensor
		t, err = d.tensorField(f, fmt.Sprintf("tensors[%d]", len(a.Tensors)))
		a.Tensors = append(a.Tensors, t)
	case 11:
		var g *Graph
		if err = f.want("graphs", protowire.BytesType); err == nil {
			g, err = d.graph(f.b)
		}
		a.Graphs = append(a.Graphs, g)
	case 14:
		a.TP, err = d.typeInfoField(f, "tp")
		seen.tp = true
	case 15:
		var tp *TypeInfo
		tp, err = d.typeInfoField(f, fmt.Sprintf("type_protos[%d]", len(a.TPs)))
		a.TPs = append(a.TPs, tp)
	case 20:
		var v int64
		v, err = f.i64("type")
		a.Type = AttrType(v)
	case 21:
		a.RefAttrName, err = f.str("ref_attr_name")
	case 22, 23:
		seen.sparse = true
	}
	return err
}

// inferAttrType guesses the type of an attribute without a type field, as
// ONNX did before IR version 3: by which value field is set.
func inferAttrType(a *Attribute, seen attrSeen) AttrType {
	switch {
	case len(a.Floats) > 0:
		return AttrFloats
	case len(a.Ints) > 0:
		return AttrInts
	case len(a.Strings) > 0:
		return AttrStrings
	case len(a.Tensors) > 0:
		return AttrTensors
	case len(a.Graphs) > 0:
		return AttrGraphs
	case len(a.TPs) > 0:
		return AttrTypeProtos
	case seen.t:
		return AttrTensor
	case seen.g:
		return AttrGraph
	case seen.tp:
		return AttrTypeProto
	case seen.sparse:
		return AttrSparseTensor
	case seen.s:
		return AttrString
	case seen.i:
		return AttrInt
	case seen.f:
		return AttrFloat
	}
	return AttrUndefined
}

// tensorField decodes a TensorProto held in f, naming it what in errors.
func (d *protoDecoder) tensorField(f wireField, what string) (*tensor.Tensor, error) {
	if err := f.want(what, protowire.BytesType); err != nil {
		return nil, err
	}
	t, _, err := d.tensor(f.b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return t, nil
}

func (d *protoDecoder) typeInfoField(f wireField, what string) (*TypeInfo, error) {
	if err := f.want(what, protowire.BytesType); err != nil {
		return nil, err
	}
	tp, err := d.typeInfo(f.b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return tp, nil
}

// typeInfo decodes a TypeProto.
func (d *protoDecoder) typeInfo(b []byte) (*TypeInfo, error) {
	if err := enterNested(&d.types, "types"); err != nil {
		return nil, err
	}
	defer func() { d.types-- }()
	ti := &TypeInfo{Kind: TypeUnknown}
	err := eachWireField(b, func(f wireField) error {
		var err error
		switch f.num {
		case 1:
			ti.Kind = TypeTensor
			err = d.tensorType(ti, f, "tensor_type")
		case 4:
			ti.Kind = TypeSequence
			err = d.wrappedType(ti, f, "sequence_type")
		case 5:
			ti.Kind = TypeMap
			err = d.mapType(ti, f)
		case 7:
			ti.Kind = TypeUnknown // opaque
		case 8:
			ti.Kind = TypeSparseTensor
			err = d.tensorType(ti, f, "sparse_tensor_type")
		case 9:
			ti.Kind = TypeOptional
			err = d.wrappedType(ti, f, "optional_type")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return ti, nil
}

// tensorType decodes TypeProto.Tensor or TypeProto.SparseTensor into ti.
func (d *protoDecoder) tensorType(ti *TypeInfo, f wireField, what string) error {
	if err := f.want(what, protowire.BytesType); err != nil {
		return err
	}
	err := eachWireField(f.b, func(f wireField) error {
		switch f.num {
		case 1:
			return ti.setElem(f, "elem_type")
		case 2:
			ti.HasShape = true
			return decodeShape(ti, f)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// setElem sets Elem and ElemCode from an elem_type or key_type field.
func (ti *TypeInfo) setElem(f wireField, what string) error {
	v, err := f.i64(what)
	if err != nil {
		return err
	}
	ti.ElemCode = int32(v)
	ti.Elem, err = DType(ti.ElemCode)
	if err != nil {
		ti.Elem = tensor.Invalid
	}
	return nil
}

// wrappedType decodes TypeProto.Sequence or TypeProto.Optional into ti.
func (d *protoDecoder) wrappedType(ti *TypeInfo, f wireField, what string) error {
	if err := f.want(what, protowire.BytesType); err != nil {
		return err
	}
	err := eachWireField(f.b, func(f wireField) error {
		if f.num != 1 {
			return nil
		}
		var err error
		ti.ElemType, err = d.typeInfoField(f, "elem_type")
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (d *protoDecoder) mapType(ti *TypeInfo, f wireField) error {
	if err := f.want("map_type", protowire.BytesType); err != nil {
		return err
	}
	err := eachWireField(f.b, func(f wireField) error {
		var err error
		switch f.num {
		case 1:
			err = ti.setElem(f, "key_type")
		case 2:
			ti.ElemType, err = d.typeInfoField(f, "value_type")
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("map_type: %w", err)
	}
	return nil
}

// decodeShape decodes a TensorShapeProto into ti.Dims.
func decodeShape(ti *TypeInfo, f wireField) error {
	if err := f.want("shape", protowire.BytesType); err != nil {
		return err
	}
	ti.Dims = ti.Dims[:0]
	err := eachWireField(f.b, func(f wireField) error {
		if f.num != 1 {
			return nil
		}
		dim, err := decodeDim(f, len(ti.Dims))
		ti.Dims = append(ti.Dims, dim)
		return err
	})
	if err != nil {
		return fmt.Errorf("shape: %w", err)
	}
	return nil
}

func decodeDim(f wireField, i int) (Dim, error) {
	var dim Dim
	if err := f.want("dim", protowire.BytesType); err != nil {
		return dim, err
	}
	err := eachWireField(f.b, func(f wireField) error {
		var err error
		switch f.num {
		case 1:
			dim = Dim{}
			dim.Value, err = f.i64("dim_value")
			dim.Known = dim.Value >= 0
			if !dim.Known {
				dim.Value = 0
			}
		case 2:
			dim = Dim{}
			dim.Param, err = f.str("dim_param")
		}
		return err
	})
	if err != nil {
		return dim, fmt.Errorf("dim %d: %w", i, err)
	}
	return dim, nil
}

// function decodes the i-th FunctionProto of a model.
func (d *protoDecoder) function(f wireField, i int) (*Function, error) {
	if err := f.want("functions", protowire.BytesType); err != nil {
		return nil, err
	}
	fn := &Function{}
	item, err := d.functionFields(f.b, fn)
	if err == nil {
		return fn, nil
	}
	where := fmt.Sprintf("function %d (%q)", i, scanString(f.b, 1))
	if item == "" {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return nil, fmt.Errorf("%s %s: %w", where, item, err)
}

func (d *protoDecoder) functionFields(b []byte, fn *Function) (item string, err error) {
	err = eachWireField(b, func(f wireField) error {
		var err error
		switch f.num {
		case 1:
			fn.Name, err = f.str("name")
		case 4:
			fn.Inputs, err = f.appendString(fn.Inputs, "input")
		case 5:
			fn.Outputs, err = f.appendString(fn.Outputs, "output")
		case 6:
			fn.Attributes, err = f.appendString(fn.Attributes, "attribute")
		case 7:
			var n *Node
			n, item, err = d.nodeField(f, len(fn.Nodes))
			fn.Nodes = append(fn.Nodes, n)
		case 9:
			var op OpsetID
			op, err = opsetID(f, len(fn.OpsetImports))
			fn.OpsetImports = append(fn.OpsetImports, op)
		case 10:
			fn.Domain, err = f.str("domain")
		case 11:
			var a *Attribute
			a, err = d.attributeField(f, len(fn.AttributeProtos))
			fn.AttributeProtos = append(fn.AttributeProtos, a)
		}
		return err
	})
	return item, err
}

// wireField is one decoded protobuf field: its number and wire type, and its
// value (u for varint and fixed types, b for length-delimited ones).
type wireField struct {
	num protowire.Number
	typ protowire.Type
	u   uint64
	b   []byte
}

// eachWireField calls fn for every field of the message b, in order. Groups
// and fields of unknown number are passed to fn too; fn ignores what it does
// not know, which skips them.
func eachWireField(b []byte, fn func(wireField) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return wireError("tag", n)
		}
		b = b[n:]
		f := wireField{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.u, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			f.u = uint64(v)
		case protowire.Fixed64Type:
			f.u, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, wireError(wireTypeName(typ), n))
		}
		b = b[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

func wireTypeName(t protowire.Type) string {
	switch t {
	case protowire.VarintType:
		return "varint"
	case protowire.Fixed32Type:
		return "fixed32"
	case protowire.Fixed64Type:
		return "fixed64"
	case protowire.BytesType:
		return "length-delimited field"
	case protowire.StartGroupType:
		return "group"
	case protowire.EndGroupType:
		return "end of group"
	}
	return fmt.Sprintf("wire type %d", int(t))
}

// wireError describes a negative length returned by a protowire Consume
// function while reading kind.
func wireError(kind string, n int) error {
	err := protowire.ParseError(n)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("truncated %s", kind)
	}
	return fmt.Errorf("bad %s: %v", kind, err)
}

// want checks that f has wire type t.
func (f wireField) want(name string, t protowire.Type) error {
	if f.typ != t {
		return fmt.Errorf("%s (field %d): wire type %s, want %s", name, f.num, wireTypeName(f.typ), wireTypeName(t))
	}
	return nil
}

func (f wireField) str(name string) (string, error) {
	if err := f.want(name, protowire.BytesType); err != nil {
		return "", err
	}
	return string(f.b), nil
}

// data returns the payload of f, copied unless alias is set.
func (f wireField) data(name string, alias bool) ([]byte, error) {
	if err := f.want(name, protowire.BytesType); err != nil {
		return nil, err
	}
	if alias {
		return f.b, nil
	}
	return append([]byte{}, f.b...), nil
}

func (f wireField) i64(name string) (int64, error) {
	if err := f.want(name, protowire.VarintType); err != nil {
		return 0, err
	}
	return int64(f.u), nil
}

func (f wireField) f32(name string) (float32, error) {
	if err := f.want(name, protowire.Fixed32Type); err != nil {
		return 0, err
	}
	return math.Float32frombits(uint32(f.u)), nil
}

func (f wireField) appendString(dst []string, name string) ([]string, error) {
	s, err := f.str(name)
	return append(dst, s), err
}

// appendInt64s appends a packed or unpacked repeated int64 field.
func (f wireField) appendInt64s(dst []int64, name string) ([]int64, error) {
	switch f.typ {
	case protowire.VarintType:
		return append(dst, int64(f.u)), nil
	case protowire.BytesType:
		for b := f.b; len(b) > 0; {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return dst, fmt.Errorf("%s: %w", name, wireError("varint", n))
			}
			dst = append(dst, int64(v))
			b = b[n:]
		}
		return dst, nil
	}
	return dst, f.want(name, protowire.VarintType)
}

// appendFloat32s appends a packed or unpacked repeated float field.
func (f wireField) appendFloat32s(dst []float32, name string) ([]float32, error) {
	switch f.typ {
	case protowire.Fixed32Type:
		return append(dst, math.Float32frombits(uint32(f.u))), nil
	case protowire.BytesType:
		if len(f.b)%4 != 0 {
			return dst, fmt.Errorf("%s: packed length %d is not a multiple of 4", name, len(f.b))
		}
		for b := f.b; len(b) > 0; b = b[4:] {
			dst = append(dst, math.Float32frombits(binary.LittleEndian.Uint32(b)))
		}
		return dst, nil
	}
	return dst, f.want(name, protowire.Fixed32Type)
}

// scanString returns the last value of the string field num in message b,
// stopping quietly at the first malformed field. It names things in errors.
func scanString(b []byte, num protowire.Number) string {
	var s string
	_ = eachWireField(b, func(f wireField) error {
		if f.num == num && f.typ == protowire.BytesType {
			s = string(f.b)
		}
		return nil
	})
	return s
}
