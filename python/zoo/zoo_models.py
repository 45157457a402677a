"""Model builders for the xserve model zoo (python/zoo/export.py).

Every builder returns a `Spec`: the module (eval mode, random weights from the
seed the caller set with torch.manual_seed), its inputs, outputs and dynamic
dims, and a function making a reference input for a given batch size.

Two variants per model:

  full   the torchvision architecture exactly as published (random weights),
         or a BERT-base-shaped encoder (hidden 768, 12 layers, 12 heads);
  small  the same architecture and operator mix at reduced width, depth or
         resolution, so that the committed fixtures (testdata/zoo) stay small.
         What was reduced is in each Spec's `note` and in manifest.json.
"""

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
import torchvision.models as tvm
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet
from torchvision.models.vgg import make_layers

MODELS = [
    "resnet18", "resnet50", "resnext50_32x4d", "alexnet", "mobilenet_v2",
    "mnasnet1_0", "vgg16", "squeezenet1_1", "vit_b_16", "bert",
]

BATCH_MAX = 1024


@dataclass
class Input:
    name: str
    dtype: torch.dtype
    # Dims: an int, or the name of a dynamic dim ("batch", "sequence").
    shape: list


@dataclass
class Spec:
    name: str
    module: nn.Module
    inputs: list
    outputs: list  # output names, in the order forward returns them
    # Dynamic dims: name -> (min, max, size used for the export example).
    dims: dict
    # make_inputs(batch, generator) -> list of tensors, one per input.
    make_inputs: Callable
    note: str = ""
    # Per-batch-size values of the other dynamic dims in reference cases.
    case_dims: dict = field(default_factory=dict)


class Named(nn.Module):
    """Wraps a torchvision model so that its input is called `image` in both
    exports (torchvision's forward calls it `x`)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, image):
        return self.model(image)


def _image_spec(name, model, size, note, classes):
    def make(batch, gen):
        return [torch.randn(batch, 3, size, size, generator=gen)]

    return Spec(
        name=name, module=Named(model).eval(),
        inputs=[Input("image", torch.float32, ["batch", 3, size, size])],
        outputs=["logits"], dims={"batch": (1, BATCH_MAX, 2)},
        make_inputs=make, note=note + f"; input [batch, 3, {size}, {size}], {classes} classes")


# ---- ResNet / ResNeXt -------------------------------------------------------

class SmallResNet(ResNet):
    """torchvision's ResNet with the stage widths (64, 128, 256, 512) replaced
    by `widths`; blocks, strides, pooling and forward are torchvision's."""

    def __init__(self, block, layers, widths, num_classes, groups=1, width_per_group=64):
        nn.Module.__init__(self)
        self._norm_layer = nn.BatchNorm2d
        self.inplanes = widths[0]
        self.dilation = 1
        self.groups = groups
        self.base_width = width_per_group
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, widths[0], layers[0])
        self.layer2 = self._make_layer(block, widths[1], layers[1], stride=2)
        self.layer3 = self._make_layer(block, widths[2], layers[2], stride=2)
        self.layer4 = self._make_layer(block, widths[3], layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3] * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


def resnet18(small):
    if not small:
        return _image_spec("resnet18", tvm.resnet18(), 224, "torchvision resnet18", 1000)
    m = SmallResNet(BasicBlock, [2, 2, 2, 2], (8, 16, 32, 64), 10)
    return _image_spec("resnet18", m, 64, "BasicBlock [2,2,2,2], stage widths (8,16,32,64) instead of (64..512)", 10)


def resnet50(small):
    if not small:
        return _image_spec("resnet50", tvm.resnet50(), 224, "torchvision resnet50", 1000)
    m = SmallResNet(Bottleneck, [3, 4, 6, 3], (4, 8, 16, 32), 10)
    return _image_spec("resnet50", m, 64, "Bottleneck [3,4,6,3], stage widths (4,8,16,32) instead of (64..512)", 10)


def resnext50_32x4d(small):
    if not small:
        return _image_spec("resnext50_32x4d", tvm.resnext50_32x4d(), 224, "torchvision resnext50_32x4d", 1000)
    m = SmallResNet(Bottleneck, [3, 4, 6, 3], (4, 8, 16, 32), 10, groups=4, width_per_group=32)
    return _image_spec("resnext50_32x4d", m, 64,
                       "Bottleneck [3,4,6,3], stage widths (4,8,16,32), groups 4 x width_per_group 32 "
                       "(grouped 3x3 convs of 8..64 channels) instead of 32x4d", 10)


# ---- AlexNet, VGG, SqueezeNet -------------------------------------------------

def alexnet(small):
    if not small:
        return _image_spec("alexnet", tvm.alexnet(), 224, "torchvision alexnet", 1000)
    m = tvm.AlexNet(num_classes=10)
    m.features = nn.Sequential(
        nn.Conv2d(3, 8, kernel_size=11, stride=4, padding=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(kernel_size=3, stride=2),
        nn.Conv2d(8, 24, kernel_size=5, padding=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(kernel_size=3, stride=2),
        nn.Conv2d(24, 48, kernel_size=3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(48, 32, kernel_size=3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(32, 32, kernel_size=3, padding=1), nn.ReLU(inplace=True),
        nn.MaxPool2d(kernel_size=3, stride=2),
    )
    # At 96x96 the features end at 2x2, so the adaptive pool is again the
    # identity-sized pool it is at full size (6x6 -> 6x6).
    m.avgpool = nn.AdaptiveAvgPool2d((2, 2))
    m.classifier = nn.Sequential(
        nn.Dropout(p=0.5), nn.Linear(32 * 2 * 2, 128), nn.ReLU(inplace=True),
        nn.Dropout(p=0.5), nn.Linear(128, 128), nn.ReLU(inplace=True), nn.Linear(128, 10))
    return _image_spec("alexnet", m, 96, "channels (8,24,48,32,32) instead of (64,192,384,256,256), "
                       "adaptive pool 2x2, classifier 128 wide", 10)


def vgg16(small):
    if not small:
        return _image_spec("vgg16", tvm.vgg16(), 224, "torchvision vgg16", 1000)
    cfg = [4, 4, "M", 8, 8, "M", 16, 16, 16, "M", 32, 32, 32, "M", 32, 32, 32, "M"]
    m = tvm.VGG(make_layers(cfg, batch_norm=False), num_classes=10)
    m.avgpool = nn.AdaptiveAvgPool2d((2, 2))  # 64x64 input -> 2x2 features (7x7 at 224)
    m.classifier = nn.Sequential(
        nn.Linear(32 * 2 * 2, 128), nn.ReLU(True), nn.Dropout(p=0.5),
        nn.Linear(128, 128), nn.ReLU(True), nn.Dropout(p=0.5), nn.Linear(128, 10))
    return _image_spec("vgg16", m, 64, "config D (13 convs, 5 max pools) at 1/16 width, adaptive pool 2x2, "
                       "classifier 128 wide", 10)


def squeezenet1_1(small):
    if not small:
        return _image_spec("squeezenet1_1", tvm.squeezenet1_1(), 224, "torchvision squeezenet1_1", 1000)
    from torchvision.models.squeezenet import Fire as TVFire
    m = tvm.squeezenet1_1(num_classes=10)
    m.features = nn.Sequential(
        nn.Conv2d(3, 16, kernel_size=3, stride=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
        TVFire(16, 4, 16, 16), TVFire(32, 4, 16, 16),
        nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
        TVFire(32, 8, 32, 32), TVFire(64, 8, 32, 32),
        nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
        TVFire(64, 12, 48, 48), TVFire(96, 12, 48, 48), TVFire(96, 16, 64, 64), TVFire(128, 16, 64, 64),
    )
    m.classifier[1] = nn.Conv2d(128, 10, kernel_size=1)
    return _image_spec("squeezenet1_1", m, 64, "version 1_1 at 1/4 width (Fire modules, ceil-mode max pools)", 10)


# ---- MobileNetV2, MNASNet ------------------------------------------------------

def mobilenet_v2(small):
    if not small:
        return _image_spec("mobilenet_v2", tvm.mobilenet_v2(), 224, "torchvision mobilenet_v2", 1000)
    from torchvision.ops.misc import Conv2dNormActivation
    m = tvm.mobilenet_v2(width_mult=0.2, num_classes=10)
    last = 128
    m.features[-1] = Conv2dNormActivation(m.features[-1][0].in_channels, last, kernel_size=1,
                                          norm_layer=nn.BatchNorm2d, activation_layer=nn.ReLU6)
    m.classifier[1] = nn.Linear(last, 10)
    m.last_channel = last
    return _image_spec("mobilenet_v2", m, 64, "width_mult 0.2, last conv 128 channels instead of 1280", 10)


def mnasnet1_0(small):
    if not small:
        return _image_spec("mnasnet1_0", tvm.mnasnet1_0(), 224, "torchvision mnasnet1_0", 1000)
    m = tvm.MNASNet(0.15, num_classes=10)
    last = 128
    m.layers[14] = nn.Conv2d(m.layers[14].in_channels, last, 1, padding=0, stride=1, bias=False)
    m.layers[15] = nn.BatchNorm2d(last)
    m.classifier[1] = nn.Linear(last, 10)
    return _image_spec("mnasnet1_0", m, 64, "alpha 0.15 instead of 1.0, last conv 128 channels instead of 1280", 10)


def mobilenet_v3_small(small):
    if not small:
        return _image_spec("mobilenet_v3_small", tvm.mobilenet_v3_small(), 224, "torchvision mobilenet_v3_small", 1000)
    m = tvm.mobilenet_v3_small(width_mult=0.25, num_classes=10)
    return _image_spec("mobilenet_v3_small", m, 64, "width_mult 0.25: depthwise convolutions, hard-swish, "
                       "squeeze-excitation", 10)


# ---- ViT -------------------------------------------------------------------

def vit_b_16(small):
    if not small:
        return _image_spec("vit_b_16", tvm.vit_b_16(), 224, "torchvision vit_b_16", 1000)
    m = tvm.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                              hidden_dim=64, mlp_dim=256, num_classes=10)
    return _image_spec("vit_b_16", m, 32, "torchvision VisionTransformer, image 32, patch 8, depth 2, "
                       "hidden 64, 4 heads, MLP 256", 10)


# ---- BERT ------------------------------------------------------------------

class BertEmbeddings(nn.Module):
    def __init__(self, vocab, hidden, max_positions, type_vocab=2, eps=1e-12, dropout=0.1):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("position_ids", torch.arange(max_positions).unsqueeze(0), persistent=False)

    def forward(self, input_ids):
        seq = input_ids.size(1)
        positions = self.position_ids[:, :seq]
        token_types = torch.zeros_like(input_ids)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_types) + self.position_embeddings(positions)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads, dropout=0.1):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, mask_bias):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask_bias
        probs = self.dropout(torch.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v).transpose(1, 2)
        b, s = ctx.shape[0], ctx.shape[1]
        return ctx.reshape(b, s, self.heads * self.head_dim)


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate, eps=1e-12, dropout=0.1):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads, dropout)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.act = nn.GELU()
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask_bias):
        a = self.attention_norm(x + self.dropout(self.attention_output(self.attention(x, mask_bias))))
        return self.output_norm(a + self.dropout(self.output(self.act(self.intermediate(a)))))


class BertEncoder(nn.Module):
    """A BERT-shaped encoder in plain torch (as HuggingFace's BertModel with
    eager attention): embeddings (word + token type + position) with
    LayerNorm, `layers` post-norm blocks of multi-head self-attention and a
    GELU feed-forward, and the tanh pooler over the first token. Returns
    (last_hidden_state, pooler_output)."""

    def __init__(self, vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072, max_positions=512):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, max_positions)
        self.layers = nn.ModuleList([BertLayer(hidden, heads, intermediate) for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.bias, std=0.02)

    def forward(self, input_ids, attention_mask):
        x = self.embeddings(input_ids)
        # 0 where a token may be attended to, -10000 where it is padding.
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


def bert(small):
    if small:
        cfg = dict(vocab=1000, hidden=64, layers=2, heads=4, intermediate=256, max_positions=64)
        seqs = {1: 12, 3: 7}
        note = "vocab 1000, hidden 64, 2 layers, 4 heads, FFN 256, 64 positions"
    else:
        cfg = dict(vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072, max_positions=512)
        seqs = {1: 128, 3: 48}
        note = "BERT-base shape: vocab 30522, hidden 768, 12 layers, 12 heads, FFN 3072, 512 positions"
    m = BertEncoder(**cfg).eval()

    def make(batch, gen):
        seq = seqs.get(batch, 16)
        ids = torch.randint(1, cfg["vocab"], (batch, seq), generator=gen, dtype=torch.int64)
        mask = torch.ones(batch, seq, dtype=torch.int64)
        for i in range(1, batch):  # later rows are padded: shorter real lengths
            real = max(1, seq - (seq * i) // batch)
            mask[i, real:] = 0
            ids[i, real:] = 0
        return [ids, mask]

    return Spec(
        name="bert", module=m,
        inputs=[Input("input_ids", torch.int64, ["batch", "sequence"]),
                Input("attention_mask", torch.int64, ["batch", "sequence"])],
        outputs=["last_hidden_state", "pooler_output"],
        dims={"batch": (1, BATCH_MAX, 2), "sequence": (2, cfg["max_positions"], 9)},
        make_inputs=make, note=note + "; GELU (erf), LayerNorm eps 1e-12, eager attention with an additive mask",
        case_dims={b: {"sequence": s} for b, s in seqs.items()})


BUILDERS = {
    "resnet18": resnet18, "resnet50": resnet50, "resnext50_32x4d": resnext50_32x4d,
    "alexnet": alexnet, "mobilenet_v2": mobilenet_v2, "mnasnet1_0": mnasnet1_0,
    "vgg16": vgg16, "squeezenet1_1": squeezenet1_1, "vit_b_16": vit_b_16, "bert": bert,
    "mobilenet_v3_small": mobilenet_v3_small,
}


@torch.no_grad()
def perturb(model, gen):
    """Makes every weight informative: normalisation layers get non-trivial
    statistics and affine parameters, and parameters a builder left constant
    (zero biases, ViT's zero head and class token) get small random values.
    Without this BatchNorm would be the identity and some outputs all zero."""
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.weight.uniform_(0.75, 1.25, generator=gen)
            m.bias.normal_(0, 0.1, generator=gen)
            m.running_mean.normal_(0, 0.1, generator=gen)
            m.running_var.uniform_(0.75, 1.25, generator=gen)
        elif isinstance(m, nn.LayerNorm):
            m.weight.uniform_(0.75, 1.25, generator=gen)
            m.bias.normal_(0, 0.1, generator=gen)
    norm_params = set()
    for m in model.modules():
        if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm)):
            norm_params.update(id(p) for p in m.parameters(recurse=False))
    for p in model.parameters():
        if id(p) in norm_params or p.numel() < 2:
            continue
        flat = p.reshape(-1)
        if bool((flat == flat[0]).all()):
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.normal_(0, 1.0 / math.sqrt(fan_in), generator=gen)
            else:
                p.normal_(0, 0.02, generator=gen)


def build(name, small, seed):
    torch.manual_seed(seed)
    spec = BUILDERS[name](small)
    spec.module.eval()
    perturb(spec.module, torch.Generator().manual_seed(seed + 1))
    return spec
