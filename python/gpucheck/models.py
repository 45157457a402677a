"""The three models of the GPU check, in PyTorch and in JAX, with the same
weights.

    cnn   torchvision's ResNet (BasicBlock): resnet18 at 224x224 on a GPU, a
          one-block-per-stage ResNet at 32x32 in the CPU dry run
    bert  a BERT-shaped encoder (token and position embeddings, post-norm
          layers of multi-head attention and a GELU MLP, a tanh pooler and a
          classifier) over int64 token ids
    vit   a ViT (16x16 patches by a strided convolution, a class token,
          pre-norm layers, a classifier on the class token)

Weights come from numpy's seeded generator, not from torch's initialisers,
so every torch version (the one here and the one on the GPU host) builds the
same model. The JAX functions read the same state dict: JAX jit runs the
same model as torch and xserve, not a look-alike.

When torchvision is missing (the GPU host's torch may come without it),
the CNN is a local copy of torchvision's ResNet with the same module names
and the same computation; the dry run checks that both agree.
"""

import inspect
import math

import numpy as np
import torch
from torch import nn

# Sizes: "gpu" on the GPU host, "cpu" for the dry run (small, so that the
# whole check takes a minute or two on a laptop-sized CPU).
SIZES = {
    "gpu": {
        "cnn": dict(layers=(2, 2, 2, 2), image=224, classes=1000),
        "bert": dict(vocab=30522, seq=128, dim=512, layers=4, heads=8, ffn=2048, labels=16),
        "vit": dict(image=224, patch=16, dim=384, layers=12, heads=6, ffn=1536, classes=1000),
    },
    "cpu": {
        "cnn": dict(layers=(1, 1, 1, 1), image=32, classes=10),
        "bert": dict(vocab=1000, seq=16, dim=64, layers=2, heads=4, ffn=128, labels=4),
        "vit": dict(image=32, patch=8, dim=64, layers=2, heads=4, ffn=128, classes=10),
    },
}

MODEL_NAMES = ("cnn", "bert", "vit")


# ---- torch modules -------------------------------------------------------


class _BasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock, same names and computation."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idn = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idn)


class _ResNet(nn.Module):
    """torchvision.models.resnet.ResNet with BasicBlock, same names."""

    def __init__(self, layers, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = 64
        for i, (n, cout) in enumerate(zip(layers, (64, 128, 256, 512))):
            blocks = []
            for j in range(n):
                blocks.append(_BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet(layers, num_classes, use_torchvision=True):
    """torchvision's ResNet(BasicBlock, layers) when torchvision imports and
    use_torchvision, else the local copy. Returns (module, source)."""
    if use_torchvision:
        try:
            from torchvision.models.resnet import BasicBlock, ResNet
        except ImportError:
            pass
        else:
            return ResNet(BasicBlock, list(layers), num_classes=num_classes), "torchvision"
    return _ResNet(layers, num_classes), "local copy of torchvision's ResNet"


class _EncoderLayer(nn.Module):
    """Multi-head self-attention and a GELU MLP, post-norm (BERT) or
    pre-norm (ViT). Attention is written out (matmul, softmax, matmul), as
    exported BERTs carry it."""

    def __init__(self, dim, heads, ffn, pre_norm, eps):
        super().__init__()
        self.heads, self.pre_norm = heads, pre_norm
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln1 = nn.LayerNorm(dim, eps=eps)
        self.ln2 = nn.LayerNorm(dim, eps=eps)
        self.fc1 = nn.Linear(dim, ffn)
        self.fc2 = nn.Linear(ffn, dim)
        self.act = nn.GELU()

    def attention(self, x):
        b, s, d = x.shape
        hd = d // self.heads
        qkv = self.qkv(x).reshape(b, s, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        a = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd)), dim=-1)
        return self.proj(torch.matmul(a, v).transpose(1, 2).reshape(b, s, d))

    def mlp(self, x):
        return self.fc2(self.act(self.fc1(x)))

    def forward(self, x):
        if self.pre_norm:
            x = x + self.attention(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attention(x))
        return self.ln2(x + self.mlp(x))


class BertEncoder(nn.Module):
    """A BERT-shaped classifier: input_ids int64[batch, seq] -> logits."""

    def __init__(self, vocab, seq, dim, layers, heads, ffn, labels):
        super().__init__()
        self.word = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.ln = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.ModuleList(_EncoderLayer(dim, heads, ffn, False, 1e-12) for _ in range(layers))
        self.pool = nn.Linear(dim, dim)
        self.cls = nn.Linear(dim, labels)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.ln(self.word(input_ids) + self.pos(pos))
        for layer in self.layers:
            x = layer(x)
        return self.cls(torch.tanh(self.pool(x[:, 0])))


class ViT(nn.Module):
    """A ViT classifier: image float32[batch, 3, H, W] -> logits."""

    def __init__(self, image, patch, dim, layers, heads, ffn, classes):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.layers = nn.ModuleList(_EncoderLayer(dim, heads, ffn, True, 1e-6) for _ in range(layers))
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, image):
        x = self.patch(image).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x)[:, 0])


# ---- weights and inputs --------------------------------------------------


def seeded_state(module, seed):
    """Fills module's parameters and buffers from numpy's generator: weights
    scaled by 1/sqrt(fan-in), norms near 1, biases and statistics small, so
    activations stay in range through the depth. Returns the module."""
    rng = np.random.default_rng(seed)
    state = module.state_dict()
    for name, t in state.items():
        if not t.is_floating_point():
            continue
        shape = tuple(t.shape)
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "running_var":
            v = rng.uniform(0.5, 1.5, shape)
        elif leaf in ("running_mean", "bias") or name.endswith("cls_token"):
            v = 0.1 * rng.standard_normal(shape)
        elif len(shape) == 1:  # norm scales
            v = 1.0 + 0.1 * rng.standard_normal(shape)
        elif leaf == "weight" and isinstance(_module_of(module, name), nn.Embedding) or name == "pos":
            v = 0.5 * rng.standard_normal(shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            v = rng.standard_normal(shape) / math.sqrt(fan_in)
        state[name] = torch.from_numpy(v.astype(np.float32))
    module.load_state_dict(state)
    return module.eval()


def _module_of(root, name):
    m = root
    for part in name.split(".")[:-1]:
        m = getattr(m, part)
    return m


class _ImageInput(nn.Module):
    """Calls its module's forward with the argument named image, so that an
    exported torchvision model's input is called "image", not "x"."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, image):
        return self.module(image)


class Spec:
    """One model of the check: the torch module (float32, eval), its input's
    name, dtype and per-row shape, its output's name, and how to make seeded
    inputs. export_module is what the exporters see: module, or module
    behind a forward whose argument has the input's name."""

    def __init__(self, name, module, source, input_name, input_dtype, row_shape, output_name, vocab=0):
        self.name, self.module, self.source = name, module, source
        self.export_module = module
        if list(inspect.signature(module.forward).parameters) != [input_name]:
            if input_name != "image":
                raise ValueError(f"{name}: forward takes {list(inspect.signature(module.forward).parameters)}, want [{input_name!r}]")
            self.export_module = _ImageInput(module).eval()
        self.input_name, self.input_dtype, self.row_shape = input_name, input_dtype, tuple(row_shape)
        self.output_name, self.vocab = output_name, vocab

    def params(self):
        return sum(p.numel() for p in self.module.parameters())

    def input(self, batch, seed):
        """A seeded numpy input of batch rows."""
        rng = np.random.default_rng(seed)
        shape = (batch,) + self.row_shape
        if self.input_dtype == "int64":
            return rng.integers(0, self.vocab, shape, dtype=np.int64)
        return rng.standard_normal(shape).astype(np.float32)


def build(name, size, use_torchvision=True):
    """The Spec of model name ("cnn", "bert", "vit") at size ("gpu", "cpu")."""
    cfg = SIZES[size][name]
    seed = {"cnn": 101, "bert": 102, "vit": 103}[name]
    if name == "cnn":
        module, source = resnet(cfg["layers"], cfg["classes"], use_torchvision)
        return Spec(name, seeded_state(module, seed), source, "image", "float32", (3, cfg["image"], cfg["image"]), "logits")
    if name == "bert":
        module = BertEncoder(**cfg)
        return Spec(name, seeded_state(module, seed), "BERT-shaped encoder (python/gpucheck/models.py)",
                    "input_ids", "int64", (cfg["seq"],), "logits", vocab=cfg["vocab"])
    if name == "vit":
        module = ViT(**cfg)
        return Spec(name, seeded_state(module, seed), "ViT (python/gpucheck/models.py)", "image", "float32",
                    (3, cfg["image"], cfg["image"]), "logits")
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")


# ---- JAX -----------------------------------------------------------------


def jax_forward(spec):
    """(fn, params): a JAX function fn(params, x) computing spec's model from
    params (its state dict as numpy arrays). Import JAX only when called."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    params = {k: v.detach().cpu().numpy() for k, v in spec.module.state_dict().items() if v.is_floating_point()}

    def linear(p, name, x):
        return x @ p[name + ".weight"].T + p[name + ".bias"]

    def layer_norm(p, name, x, eps):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / jnp.sqrt(v + eps) * p[name + ".weight"] + p[name + ".bias"]

    def conv(x, w, stride, pad, b=None):
        y = lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad), (pad, pad)],
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return y if b is None else y + b[None, :, None, None]

    def bn(p, name, x):
        scale = p[name + ".weight"] / jnp.sqrt(p[name + ".running_var"] + 1e-5)
        shift = p[name + ".bias"] - p[name + ".running_mean"] * scale
        return x * scale[None, :, None, None] + shift[None, :, None, None]

    def encoder_layer(p, name, x, heads, pre_norm, eps):
        def attention(h):
            b, s, d = h.shape
            hd = d // heads
            qkv = linear(p, name + ".qkv", h).reshape(b, s, 3, heads, hd).transpose(2, 0, 3, 1, 4)
            a = jax.nn.softmax(qkv[0] @ qkv[1].transpose(0, 1, 3, 2) * (1.0 / math.sqrt(hd)), axis=-1)
            return linear(p, name + ".proj", (a @ qkv[2]).transpose(0, 2, 1, 3).reshape(b, s, d))

        def mlp(h):
            return linear(p, name + ".fc2", jax.nn.gelu(linear(p, name + ".fc1", h), approximate=False))

        if pre_norm:
            x = x + attention(layer_norm(p, name + ".ln1", x, eps))
            return x + mlp(layer_norm(p, name + ".ln2", x, eps))
        x = layer_norm(p, name + ".ln1", x + attention(x), eps)
        return layer_norm(p, name + ".ln2", x + mlp(x), eps)

    m = spec.module
    if spec.name == "cnn":
        stages = [len(getattr(m, f"layer{i}")) for i in range(1, 5)]

        def fn(p, x):
            x = jax.nn.relu(bn(p, "bn1", conv(x, p["conv1.weight"], 2, 3)))
            x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), [(0, 0), (0, 0), (1, 1), (1, 1)])
            for i, n in enumerate(stages):
                for j in range(n):
                    pre = f"layer{i + 1}.{j}"
                    stride = 2 if (j == 0 and i > 0) else 1
                    idn = x
                    if pre + ".downsample.0.weight" in p:
                        idn = bn(p, pre + ".downsample.1", conv(x, p[pre + ".downsample.0.weight"], stride, 0))
                    out = jax.nn.relu(bn(p, pre + ".bn1", conv(x, p[pre + ".conv1.weight"], stride, 1)))
                    out = bn(p, pre + ".bn2", conv(out, p[pre + ".conv2.weight"], 1, 1))
                    x = jax.nn.relu(out + idn)
            return linear(p, "fc", x.mean(axis=(2, 3)))
    elif spec.name == "bert":
        n_layers, heads = len(m.layers), m.layers[0].heads

        def fn(p, ids):
            x = p["word.weight"][ids] + p["pos.weight"][: ids.shape[1]][None]
            x = layer_norm(p, "ln", x, 1e-12)
            for i in range(n_layers):
                x = encoder_layer(p, f"layers.{i}", x, heads, False, 1e-12)
            return linear(p, "cls", jnp.tanh(linear(p, "pool", x[:, 0])))
    else:
        n_layers, heads = len(m.layers), m.layers[0].heads
        patch = m.patch.stride[0]

        def fn(p, image):
            x = conv(image, p["patch.weight"], patch, 0, p["patch.bias"])
            b, d = x.shape[0], x.shape[1]
            x = x.reshape(b, d, -1).transpose(0, 2, 1)
            x = jnp.concatenate([jnp.broadcast_to(p["cls_token"], (b, 1, d)), x], axis=1) + p["pos"]
            for i in range(n_layers):
                x = encoder_layer(p, f"layers.{i}", x, heads, True, 1e-6)
            return linear(p, "head", layer_norm(p, "ln", x, 1e-6)[:, 0])
    return fn, params
