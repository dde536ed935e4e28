#!/usr/bin/python3
"""PyTorch side of the trainer cross-check: rebuild the model in PyTorch (float64), load the weights
and input the C++ side wrote, run forward + backward with the given output gradient, and write the
output, the input gradient, every parameter gradient and the updated buffers.

Files (all in the tensor exchange format of docs/trainer.md):
  <workdir>/model.bin  parameters and buffers by state_dict name, plus "config" = [batch, size, classes, in_channels]
  <workdir>/io.bin     "input", "output_grad"
  <workdir>/torch.bin  written here: "output", "input_grad", "grad/<name>", "state/<name>" from float64,
                       and the same under "f32/" from a float32 run: the C++ side uses float32 PyTorch's
                       own distance to float64 as the measure of how ill-conditioned a tensor is
                       (a ReLU input within rounding of 0 flips in any float32 implementation).
Exit codes: 0 done, 77 torch is not installed (the caller reports SKIP), anything else an error.
"""
import argparse
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError as e:  # the C++ driver turns 77 into a loud ctest SKIP
    print(f"torch_crosscheck.py: SKIP, cannot import torch/numpy: {e}", file=sys.stderr)
    sys.exit(77)

MAGIC = b"FSTENSOR"
VERSION = 1


def read_tensors(path):
    out = {}
    with open(path, "rb") as f:
        if f.read(8) != MAGIC:
            raise SystemExit(f"{path}: not a FanStore tensor file")
        version, count = struct.unpack("<II", f.read(8))
        if version != VERSION:
            raise SystemExit(f"{path}: version {version}, this script reads {VERSION}")
        for _ in range(count):
            (name_len,) = struct.unpack("<I", f.read(4))
            name = f.read(name_len).decode()
            (rank,) = struct.unpack("<I", f.read(4))
            shape = struct.unpack(f"<{rank}q", f.read(8 * rank))
            n = int(np.prod(shape)) if rank else 1
            out[name] = np.frombuffer(f.read(4 * n), dtype="<f4").reshape(shape).copy()
    return out


def write_tensors(path, tensors):
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<II", VERSION, len(tensors)))
        for name, value in tensors.items():
            a = np.ascontiguousarray(value, dtype="<f4")
            encoded = name.encode()
            f.write(struct.pack("<I", len(encoded)))
            f.write(encoded)
            f.write(struct.pack("<I", a.ndim))
            f.write(struct.pack(f"<{a.ndim}q", *a.shape))
            f.write(a.tobytes())


# ---- MLPerf image_segmentation 3D U-Net (same module names as the MLPerf reference) ----

def conv_block(cin, cout, stride):
    return nn.Sequential(nn.Conv3d(cin, cout, 3, stride=stride, padding=1, bias=False),
                         nn.InstanceNorm3d(cout, affine=True), nn.ReLU())


class InputBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = conv_block(cin, cout, 1)
        self.conv2 = conv_block(cout, cout, 1)

    def forward(self, x):
        return self.conv2(self.conv1(x))


class DownsampleBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = conv_block(cin, cout, 2)
        self.conv2 = conv_block(cout, cout, 1)

    def forward(self, x):
        return self.conv2(self.conv1(x))


class UpsampleBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.upsample_conv = nn.Sequential(nn.ConvTranspose3d(cin, cout, 2, stride=2, padding=0, bias=True))
        self.conv1 = conv_block(2 * cout, cout, 1)
        self.conv2 = conv_block(cout, cout, 1)

    def forward(self, x, skip):
        x = self.upsample_conv(x)
        x = torch.cat((x, skip), dim=1)
        return self.conv2(self.conv1(x))


class OutputLayer(nn.Module):
    def __init__(self, cin, n_class):
        super().__init__()
        self.conv = nn.Conv3d(cin, n_class, 1, stride=1, padding=0, bias=True)

    def forward(self, x):
        return self.conv(x)


class Unet3D(nn.Module):
    def __init__(self, in_channels, n_class):
        super().__init__()
        filters = [32, 64, 128, 256, 320]
        self.input_block = InputBlock(in_channels, filters[0])
        self.downsample = nn.ModuleList([DownsampleBlock(i, o) for i, o in zip(filters[:-1], filters[1:])])
        self.bottleneck = DownsampleBlock(filters[-1], filters[-1])
        up = [UpsampleBlock(filters[-1], filters[-1])]
        up += [UpsampleBlock(i, o) for i, o in zip(reversed(filters[1:]), reversed(filters[:-1]))]
        self.upsample = nn.ModuleList(up)
        self.output = OutputLayer(filters[0], n_class)

    def forward(self, x):
        x = self.input_block(x)
        outputs = [x]
        for down in self.downsample:
            x = down(x)
            outputs.append(x)
        x = self.bottleneck(x)
        for up, skip in zip(self.upsample, reversed(outputs)):
            x = up(x, skip)
        return self.output(x)


# ---- MLPerf HPC CosmoFlow (PyTorch port of the Keras reference, channels-first flatten) ----

class ConvBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, 3, padding=1, bias=True)
        self.act = nn.LeakyReLU(0.3)
        self.pool = nn.MaxPool3d(2)

    def forward(self, x):
        return self.pool(self.act(self.conv(x)))


class CosmoFlow(nn.Module):
    def __init__(self, in_channels, size, targets):
        super().__init__()
        blocks, c = [], in_channels
        for i in range(5):
            blocks.append(ConvBlock(c, 32 << i))
            c = 32 << i
        self.conv_blocks = nn.ModuleList(blocks)
        s = size // 32
        self.fc1 = nn.Linear(c * s * s * s, 128)
        self.fc2 = nn.Linear(128, 64)
        self.fc3 = nn.Linear(64, targets)
        self.act = nn.LeakyReLU(0.3)

    def forward(self, x):
        for b in self.conv_blocks:
            x = b(x)
        x = torch.flatten(x, 1)
        x = self.act(self.fc1(x))
        x = self.act(self.fc2(x))
        return torch.tanh(self.fc3(x)) * 1.2


def build(name, in_channels, size, classes):
    if name == "resnet50":
        import torchvision
        return torchvision.models.resnet50(num_classes=classes)
    if name == "unet3d":
        return Unet3D(in_channels, classes)
    if name == "cosmoflow":
        return CosmoFlow(in_channels, size, classes)
    raise SystemExit(f"unknown model {name}")


def run(name, state, io, batch, size, classes, in_channels, dtype, prefix):
    """Forward + backward of a fresh model in `dtype`; returns the tensors to write, names prefixed."""
    model = build(name, in_channels, size, classes).to(dtype)
    own = model.state_dict()
    ours = set(state)
    theirs = {k for k in own if not k.endswith("num_batches_tracked")}
    if ours != theirs:
        raise SystemExit(f"parameter names differ: only C++ {sorted(ours - theirs)[:5]}, only torch {sorted(theirs - ours)[:5]}")
    for k, v in state.items():
        if tuple(own[k].shape) != v.shape:
            raise SystemExit(f"{k}: torch shape {tuple(own[k].shape)}, C++ shape {v.shape}")
    model.load_state_dict({k: torch.from_numpy(v).to(dtype) for k, v in state.items()}, strict=False)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"torch {name} ({dtype}): {n_params} parameters, input {io['input'].shape}", flush=True)

    model.train()
    x = torch.from_numpy(io["input"]).to(dtype).requires_grad_(True)
    y = model(x)
    y.backward(torch.from_numpy(io["output_grad"]).to(dtype))

    out = {prefix + "output": y.detach().numpy(), prefix + "input_grad": x.grad.numpy()}
    for k, p in model.named_parameters():
        out[f"{prefix}grad/{k}"] = p.grad.numpy()
    for k, b in model.named_buffers():
        if not k.endswith("num_batches_tracked"):
            out[f"{prefix}state/{k}"] = b.numpy()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    state = read_tensors(f"{args.workdir}/model.bin")
    io = read_tensors(f"{args.workdir}/io.bin")
    batch, size, classes, in_channels = (int(v) for v in state.pop("config"))
    out = {}
    for dtype, prefix in ((torch.float64, ""), (torch.float32, "f32/")):
        out.update(run(args.model, state, io, batch, size, classes, in_channels, dtype, prefix))
    write_tensors(f"{args.workdir}/torch.bin", out)


if __name__ == "__main__":
    main()
