package onnx

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // formats image.Decode recognizes
	_ "image/jpeg"
	_ "image/png"
	"io"
	"strconv"

	_ "golang.org/x/image/bmp"
	_ "golang.org/x/image/tiff"
	_ "golang.org/x/image/webp"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// maxImagePixels bounds the images ImageDecoder decodes (64 megapixels).
const maxImagePixels = 1 << 26

// registerImageDecoder registers ImageDecoder (opset 20).
func registerImageDecoder(cs converters) {
	cs.register("", "ImageDecoder", 20, imImageDecoder)
}

// imImageDecoder converts ImageDecoder(encoded_stream): the image is
// decoded on the host when the import knows the encoded bytes (a constant,
// or a graph input whose value is given at compile time: a
// *NeedsValueError names it otherwise), and becomes a constant [H, W, 3]
// (pixel_format RGB or BGR) or [H, W, 1] (Grayscale) uint8 tensor. XLA has
// no image codecs; the formats are Go's: JPEG, PNG, GIF, BMP, TIFF, WebP
// and binary PNM (P5, P6). JPEG 2000 is unsupported.
func imImageDecoder(c *Ctx, n *Node) error {
	enc, err := c.ConstValue(0)
	if err != nil {
		return err
	}
	if enc.DType != tensor.Uint8 || enc.Rank() != 1 {
		return fmt.Errorf("ImageDecoder encoded_stream is %s, want uint8 of rank 1", enc)
	}
	format := c.AttrString("pixel_format", "RGB")
	if format != "RGB" && format != "BGR" && format != "Grayscale" {
		return fmt.Errorf("ImageDecoder pixel_format %q, want RGB, BGR or Grayscale", format)
	}
	img, err := decodeImage(enc.Data)
	if err != nil {
		return err
	}
	c.SetOutput(0, c.Constant("decoded_image", imageTensor(img, format)))
	return nil
}

// decodeImage decodes data in any format Go reads, or binary PNM.
func decodeImage(data []byte) (image.Image, error) {
	if bytes.HasPrefix(data, []byte("\x00\x00\x00\x0cjP  ")) || bytes.HasPrefix(data, []byte("\xff\x4f\xff\x51")) {
		return nil, Unsupported("ImageDecoder of a JPEG 2000 image (no decoder)")
	}
	r := bytes.NewReader(data)
	var cfg image.Config
	var err error
	pnm := bytes.HasPrefix(data, []byte("P5")) || bytes.HasPrefix(data, []byte("P6"))
	if !pnm {
		if cfg, _, err = image.DecodeConfig(r); err != nil {
			return nil, fmt.Errorf("ImageDecoder: %w", err)
		}
		if int64(cfg.Width)*int64(cfg.Height) > maxImagePixels {
			return nil, fmt.Errorf("ImageDecoder: image of %dx%d exceeds the limit of %d pixels", cfg.Width, cfg.Height, maxImagePixels)
		}
		r.Reset(data)
		img, format, err := image.Decode(r)
		if err != nil {
			return nil, fmt.Errorf("ImageDecoder: %w", err)
		}
		if y, ok := img.(*image.YCbCr); ok && format == "jpeg" {
			return fxgraph.LibjpegRGB(y), nil
		}
		return img, nil
	}
	return decodePNM(data)
}

// decodePNM decodes a binary PGM (P5) or PPM (P6) image with 8-bit
// samples.
func decodePNM(data []byte) (image.Image, error) {
	br := bufio.NewReader(bytes.NewReader(data))
	var hdr [4]int // magic digit, width, height, maxval
	for i := range hdr {
		tok, err := pnmToken(br)
		if err != nil {
			return nil, fmt.Errorf("ImageDecoder: PNM header: %w", err)
		}
		if i == 0 {
			hdr[0] = int(tok[1] - '0')
			continue
		}
		if hdr[i], err = strconv.Atoi(tok); err != nil || hdr[i] <= 0 {
			return nil, fmt.Errorf("ImageDecoder: PNM header value %q", tok)
		}
	}
	w, h, maxval := hdr[1], hdr[2], hdr[3]
	if maxval > 255 || int64(w)*int64(h) > maxImagePixels {
		return nil, fmt.Errorf("ImageDecoder: PNM of %dx%d with maxval %d (8-bit samples and at most %d pixels only)", w, h, maxval, maxImagePixels)
	}
	ch := 1
	if hdr[0] == 6 {
		ch = 3
	}
	pix := make([]byte, w*h*ch)
	if _, err := io.ReadFull(br, pix); err != nil {
		return nil, fmt.Errorf("ImageDecoder: PNM data: %w", err)
	}
	if ch == 1 {
		return &image.Gray{Pix: pix, Stride: w, Rect: image.Rect(0, 0, w, h)}, nil
	}
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range w * h {
		copy(img.Pix[4*i:], pix[3*i:3*i+3])
		img.Pix[4*i+3] = 255
	}
	return img, nil
}

// pnmToken reads the next whitespace-separated header token, skipping
// comments, and the one whitespace byte after it.
func pnmToken(br *bufio.Reader) (string, error) {
	var tok []byte
	for {
		b, err := br.ReadByte()
		if err != nil {
			return "", err
		}
		switch {
		case b == '#' && len(tok) == 0:
			if _, err := br.ReadString('\n'); err != nil {
				return "", err
			}
		case b == ' ' || b == '\t' || b == '\n' || b == '\r':
			if len(tok) > 0 {
				return string(tok), nil
			}
		default:
			if len(tok) > 16 {
				return "", errors.New("token too long")
			}
			tok = append(tok, b)
		}
	}
}

// imageTensor lays img out as [H, W, 3] RGB or BGR, or [H, W, 1]
// Grayscale (ITU-R 601 luma with Pillow's rounding, from the RGB values).
func imageTensor(img image.Image, format string) *tensor.Tensor {
	b := img.Bounds()
	h, w := int64(b.Dy()), int64(b.Dx())
	ch := int64(3)
	if format == "Grayscale" {
		ch = 1
	}
	t := tensor.New(tensor.Uint8, h, w, ch)
	for y := range h {
		for x := range w {
			c := color.NRGBAModel.Convert(img.At(b.Min.X+int(x), b.Min.Y+int(y))).(color.NRGBA)
			px := t.Data[(y*w+x)*ch:]
			switch format {
			case "RGB":
				px[0], px[1], px[2] = c.R, c.G, c.B
			case "BGR":
				px[0], px[1], px[2] = c.B, c.G, c.R
			default:
				px[0] = uint8((19595*uint32(c.R) + 38470*uint32(c.G) + 7471*uint32(c.B) + 0x8000) >> 16)
			}
		}
	}
	return t
}
